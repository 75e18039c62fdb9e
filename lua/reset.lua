--[[ reset.lua: forget what the policy learnt; optionally store a new config.

Clears the window, pause, hold and adaptive memory and sets capacity to
max_capacity. With config pairs, they replace the stored config first
(GovernorConfig of the caller: ``configure()``); without, the stored config
stays (``reset()``). Leases and the queue are kept: holders keep running,
waiters keep their places.

Uses    lib/admission.lua, lib/admin.lua, lib/config.lua (after lib/common.lua)
KEYS    the governor's eight keys, see lib/common.lua
ARGV
  ARGV[1] now      int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel  string        where grants to waiters are announced
  ARGV[3..] config name, value pairs (CONFIG in lib/common.lua), or none
Reply
  the status reply of status.lua, after the reset
  {1, 'missing'}   no such governor: run init.lua, then call again
]]

local cfg, raw = nil, nil
if #ARGV >= 3 then cfg, raw = parse_config(3) end
check_types()
if not load_state() then return missing_reply() end
local rl, total = window()
local before = {'from', S.cap, 'was_paused', S.paused, 'window_limited', rl, 'window_attempts', total}
redis.call('DEL', K.attempts, K.limited)
if cfg then
  apply_config(cfg, raw)
  log('reset', 'why', 'operator: new config stored, learnt state cleared', unpack(before))
  redis.call('PUBLISH', CHANNEL, S.epoch .. ' !config')  -- clients learn the stored config anew
else
  cfg = {}
  for _, name in ipairs(CONFIG) do cfg[name] = S[name] end
  apply_config(cfg, RAW)
  log('reset', 'why', 'operator: learnt state cleared', unpack(before))
end
reclaim(true)
grant()
return finish(status_reply())
