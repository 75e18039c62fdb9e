--[[ probe.lua: time-driven recovery; reclaims, lifts a drained pause, grows
capacity by time while callers wait at it with nothing refused (no_news of
lib/policy.lua), admits.

Uses    lib/call.lua, lib/fields.lua, lib/capacity.lua, lib/upkeep.lua, lib/queue.lua,
        lib/policy.lua, lib/admin.lua
KEYS    the governor's keys, see lib/common.lua
ARGV
  ARGV[1] now      int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel  string        where grants to waiters are announced
Reply
  the status reply of status.lua, after the probe
  {SCHEMA, 'missing'}   no such governor: run init.lua, then call again
]]

-- step: the state
clock()
check_types()
if not load_all() then return missing_reply() end
local grow = no_news()
keep_alive()
-- step: the writes
reclaim(true)
recover()
if grow then grow() end
grant()
return finish(status_reply())
