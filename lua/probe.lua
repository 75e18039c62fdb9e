--[[ probe.lua: time-driven recovery; reclaims, lifts a drained pause, admits.

Uses    lib/common.lua, lib/capacity.lua, lib/upkeep.lua, lib/queue.lua, lib/admin.lua
KEYS    the governor's keys, see lib/common.lua
ARGV
  ARGV[1] now      int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel  string        where grants to waiters are announced
Reply
  the status reply of status.lua, after the probe
  {SCHEMA, 'missing'}   no such governor: run init.lua, then call again
]]

clock()
check_types()
if not load_all() then return missing_reply() end
keep_alive()
reclaim(true)
recover()
grant()
return finish(status_reply())
