--[[ lib/admin.lua: what the rarely run scripts share.

Uses lib/common.lua and lib/admission.lua. status_reply() is the reply of
status, probe and the operator scripts (which also call check_types() of
lib/common.lua before they write).
]]

want_all()  -- it may read any field of the state

local function status_reply()
  local rl, total = window()
  return {
    SCHEMA, 'status',
    'now', NOW, 'epoch', S.epoch, 'policy', S.policy,
    'capacity', S.cap, 'max_capacity', S.max,
    'paused', S.paused, 'pause_kind', S.pause_kind, 'reason', S.reason,
    'paused_until', S.paused_until, 'not_before', S.not_before,
    'in_flight', in_flight(), 'queued', queued(),
    'window_limited', rl, 'window_attempts', total,
    'window_ms', S.window_ms, 'streak', S.streak, 'fence', S.fence,
    'ceiling', S.ceiling, 'quota_exhausted', S.quota_count,
    'quota_at', S.quota_at, 'created', S.created,
  }
end

