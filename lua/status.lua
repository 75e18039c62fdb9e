--[[ status.lua: read-only view of a governor; writes nothing.

Counts are derived at NOW, so leases past their expiry and waiters past
their deadline are not counted even before a writing script reclaims them.

Uses    lib/common.lua, lib/call.lua, lib/fields.lua, lib/admin.lua
KEYS    the governor's keys, see lib/common.lua
ARGV
  ARGV[1] now      int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel  string        unused (common to every script)
Reply
  {SCHEMA, 'status', name1, value1, name2, value2, ...} with the names of
    governor.protocol.STATUS_FIELDS: now, epoch, policy, capacity,
    max_capacity, paused (0|1), pause_kind, pause_reason, paused_until (ms,
    0 none), not_before (ms, 0 none), in_flight, queued, window_rate_limited,
    window_attempts, window_ms, streak, fence, ceiling, background_ppm
    (adaptive: the estimated background refusal share, per million), quota_exhausted,
    quota_at (ms), quota_until (ms, 0 unknown), created (ms), blocked (why a new caller would wait, '')
  {SCHEMA, 'missing'}   no such governor
]]

READ_ONLY = true  -- registered no-writes: a state that came back is reported, not handled
-- step: the state
clock()
if not load_all() then return missing_reply() end
return status_reply()
