--[[ lib/admin.lua: what the rarely run scripts share.

Uses lib/common.lua and lib/admission.lua. load_all() reads and checks
every field of the three hashes (HGETALL each); status_reply() is the
reply of status, probe and the operator scripts (which also call
check_types() of lib/common.lua before they write).
]]

-- Every field of the state, config and policy hashes, each checked (see
-- check_all); nil when the governor does not exist. A state written by
-- another schema says so first.
local STATUS_LOAD = {'epoch', 'schema'}
local function load_all()
  if not load(STATUS_LOAD) then return nil end
  if S.schema ~= SCHEMA then fail('SCHEMA', S.schema .. ' (this client speaks ' .. SCHEMA .. ')') end
  check_all()
  return S
end

-- Why a new caller would wait now ('' when it would be admitted).
local function why_blocked()
  local why = blocked(1)
  if not why and redis.call('ZCOUNT', K.waiters, LIVE, '+inf') > 0 then why = 'earlier callers are queued' end
  return why or ''
end

local function status_reply()
  local rl, total = window()
  return {
    SCHEMA, 'status',
    'now', NOW, 'epoch', S.epoch, 'policy', C.policy,
    'capacity', S.capacity, 'max_capacity', C.max_capacity,
    'paused', S.paused, 'pause_kind', S.pause_kind, 'pause_reason', S.pause_reason,
    'paused_until', S.paused_until, 'not_before', S.not_before,
    'in_flight', in_flight(), 'queued', redis.call('ZCOUNT', K.waiters, LIVE, '+inf'),
    'window_rate_limited', rl, 'window_attempts', total,
    'window_ms', C.window_ms, 'streak', P.streak or 0, 'fence', S.fence,
    'ceiling', P.ceiling or 0, 'quota_exhausted', S.quota_exhausted,
    'quota_at', S.quota_at, 'created', S.created, 'blocked', why_blocked(),
  }
end
