--[[ reset.lua: operator reset; forget what the policy learnt, apply a config.

Clears the window, pause, hold and adaptive memory and sets capacity to
max_capacity from the given config, which replaces the stored one. Leases
and the queue are kept: holders keep running, waiters keep their places.

KEYS    the governor's eight keys, see common.lua
ARGV
  ARGV[1] now      int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel  string        where grants to waiters are announced
  ARGV[3..] config name, value pairs (see CONFIG_FIELDS in common.lua)
Reply
  the status reply of status.lua, after the reset
  {1, 'missing'}   no such governor: run init.lua, then call again
]]

local cfg = parse_config(3)
if not load_state() then return missing_reply() end
redis.call('DEL', K.attempts, K.limited)
apply_config(cfg)
log('reset', 'why', 'operator reset')
reclaim()
grant()
return finish(status_reply())
