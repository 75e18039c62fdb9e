--[[ lib/upkeep.lua: what a writing call removes before it counts.

Uses lib/common.lua, lib/fields.lua, lib/decisions.lua, lib/records.lua, lib/shares.lua,
lib/origin.lua.
Defines: reclaim.
reclaim() removes expired leases, dead waiters and old
window events (the fields it uses are read first: lib/plans.lua).
]]

-- Remove what no longer counts: expired leases and waiters that stopped
-- refreshing (at most BATCH of each), window events older than the window.
-- At most once per RECLAIM_MS; `force` for the scripts that run rarely.
-- Needs STATE.reclaim_due (load it).
local function reclaim(force)
  if not force and NOW < STATE.reclaim_due then return end
  check_types()
  set('state', 'reclaim_due', NOW + RECLAIM_MS)
  keys_lost()  -- leases or holders gone while the state stayed (lib/origin.lua)
  local expired = redis.call('ZRANGEBYSCORE', KEY.leases, '(0', NOW, 'LIMIT', 0, BATCH)  -- not the sentinel
  if #expired > 0 then
    local counted = redis.call('EXISTS', KEY.held) == 1  -- each lease's record is read only then
    local records = redis.call('HMGET', KEY.holders, unpack(counted and expired or {expired[1]}))
    local first = record_parse(records[1])
    redis.call('ZREM', KEY.leases, unpack(expired))
    redis.call('HDEL', KEY.holders, unpack(expired))
    if counted then
      for i = 1, #expired do held_remove(record_parse(records[i]), true) end
    end
    log('expire', 'leases', #expired, 'holder', first and first.holder or '',
      'why', 'holders stopped renewing (crashed or stalled past their TTL)')
  end
  local dead = redis.call('ZRANGEBYSCORE', KEY.waiters, '-inf', NOW, 'LIMIT', 0, BATCH)
  if #dead > 0 then
    redis.call('ZREM', KEY.waiters, unpack(dead))
    redis.call('ZREM', KEY.queue, unpack(dead))
    redis.call('ZREM', KEY.parked, unpack(dead))
    if (STATE.aging_due or 1) > 0 then redis.call('ZREM', KEY.aging, unpack(dead)) end
    redis.call('HDEL', KEY.holders, unpack(dead))
  end
  -- A tenant whose finish tag is behind its class's vtime starts there
  -- anyway: its entry says nothing, so idle tenants leave no trace (when
  -- the call read the queue's fields: a call that knows nobody waits leaves
  -- this to the next).
  for rank = 0, MAX_CLASSES - 1 do
    local vtime = STATE[VTIMES[rank + 1]]
    if vtime and vtime > 0 then
      redis.call('ZREMRANGEBYSCORE', KEY.shares, rank * QUEUE_BAND, rank * QUEUE_BAND + vtime)
    end
  end
  local horizon = '(' .. (NOW - CONFIG.window_ms)
  redis.call('ZREMRANGEBYSCORE', KEY.attempts, '-inf', horizon)
  redis.call('ZREMRANGEBYSCORE', KEY.limited, '-inf', horizon)
end
