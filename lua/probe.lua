--[[ probe.lua: time-driven recovery; reclaims, lifts a drained pause, admits.

KEYS    the governor's eight keys, see common.lua
ARGV
  ARGV[1] now      int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel  string        where grants to waiters are announced
Reply
  the status reply of status.lua, after the probe
  {1, 'missing'}   no such governor: run init.lua, then call again
]]

if not load_state() then return missing_reply() end
reclaim()
recover()
grant()
return finish(status_reply())
