--[[ reset.lua: forget what the policy learnt; optionally store a new config.

Clears the window, pause, hold and adaptive memory and sets capacity to
max_capacity. With config pairs, they replace the stored config first
(GovernorConfig of the caller: ``configure()``); without, the stored config
stays (``reset()``). Leases and the queue are kept: holders keep running,
waiters keep their places.

KEYS    the governor's eight keys, see common.lua
ARGV
  ARGV[1] now      int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel  string        where grants to waiters are announced
  ARGV[3..] config name, value pairs (see CONFIG_FIELDS in common.lua), or none
Reply
  the status reply of status.lua, after the reset
  {1, 'missing'}   no such governor: run init.lua, then call again
]]

local cfg = nil
if #ARGV >= 3 then cfg = parse_config(3) end
if not load_state() then return missing_reply() end
redis.call('DEL', K.attempts, K.limited)
if cfg then
  apply_config(cfg)
  log('reset', 'why', 'operator: new config stored, learnt state cleared')
else
  cfg = {}
  for name in pairs(CONFIG_FIELDS) do cfg[name] = S[name] end
  cfg.policy = S.policy
  apply_config(cfg)
  log('reset', 'why', 'operator: learnt state cleared')
end
reclaim()
grant()
return finish(status_reply())
