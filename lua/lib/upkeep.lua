--[[ lib/upkeep.lua: what a writing call reads first and what it removes.

Uses lib/common.lua, lib/fields.lua, lib/decisions.lua, lib/records.lua, lib/budgets.lua,
lib/shares.lua, lib/origin.lua.
Defines: reclaim, PAUSE_FIELDS, ADMIT, WRITE, REPORT, PREPARE_READS, queue_settled, prepare.
prepare() reads, before a call's first write, every field the later steps
of the call may use; reclaim() removes expired leases, dead waiters and old
window events.
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

local PAUSE_FIELDS = {'paused', 'pause_kind', 'pause_reason', 'paused_until', 'saved_capacity'}
-- What the operations load first (load): acquire's admission fields, and
-- with reclaim's due time for those that reclaim.
local ADMIT = {'epoch', 'capacity', 'not_before', 'touch_due', 'budgets', 'capped'}
local WRITE = {'epoch', 'capacity', 'not_before', 'touch_due', 'reclaim_due', 'budgets', 'capped', 'aging_due'}
-- (a report reads the epoch, the hold and the queue's aging only when it
-- may grant or hold: prepare(), its retry-after)
local REPORT = {'capacity', 'touch_due', 'reclaim_due', 'event_seq', 'budgets', 'capped'}
-- What prepare() reads of the config; what a quiet report reads when it creates the window's key.
local PREPARE_CONFIG = {'policy', 'window_ms', 'log_length', 'max_capacity', 'idle_ms', 'aging_ms'}
local IDLE = {'idle_ms'}
-- What prepare() reads (lists made once): of the state, with the queue's
-- aging (state), without (quiet: nobody waits), with the aging and the
-- vtime of class rank (join[rank + 1]: a caller joins it); of the config,
-- on a hand-over of a lower class (hand_over: its waiter ages, the aging
-- key may be created). admit[rank + 1]: what acquire loads first when
-- callers wait, ADMIT and join's, in one HMGET (a newcomer of that class
-- then joins them, FIFO; only a try, denied, reads the three for nothing).
local PREPARE_READS = {
  state = {'epoch', 'not_before', 'reclaim_due', 'capped', 'aging_due'},
  quiet = {'epoch', 'not_before', 'reclaim_due', 'capped'},
  join = {},
  admit = {},
  hand_over = {'aging_ms', 'idle_ms'},
}
for r = 1, #VTIMES do
  local join, admit, known = {'epoch', 'not_before', 'reclaim_due', 'capped', 'aging_due', VTIMES[r]}, {}, {}
  for i = 1, #ADMIT do admit[i], known[ADMIT[i]] = ADMIT[i], true end
  for i = 1, #join do
    if not known[join[i]] then admit[#admit + 1] = join[i] end
  end
  PREPARE_READS.join[r], PREPARE_READS.admit[r] = join, admit
end

-- Whether nothing due can move the queue's head before a grant: no
-- reclaim (dead waiters go) and no aging (aged waiters go ahead). Needs
-- STATE.reclaim_due and STATE.aging_due.
local function queue_settled()
  return NOW < STATE.reclaim_due and (STATE.aging_due == 0 or NOW < STATE.aging_due)
end

-- Read every field reclaim, recover, blocked, grant, pause and log may use,
-- before a script's first write (reads after a write could fail it
-- half-way). Capacity is 0 only while paused: the pause's own fields are
-- read only then; the queue's aging unless `queued` is false (then the
-- call must not enqueue or grant); the vtime of class `rank` (a caller
-- joining it), and every class's when reclaim() is due (grant() only
-- writes them). `hand_over`: the call only grants the queue's head or
-- joins a queue already there (release, acquire): while nothing else is
-- due (no reclaim, no aging, no pause) and no budget, cap or reserve is
-- on, its later steps use no config but a lower class's aging and the
-- idle time of a key they create (PREPARE_READS.hand_over; enqueue()
-- reads the idle time when it creates the shares' key, before its first
-- write).
local function prepare(queued, rank, hand_over)
  local fields = PREPARE_READS.state
  if rank then
    fields = PREPARE_READS.join[rank + 1]  -- and the class a caller joins
  elseif queued == false then
    fields = PREPARE_READS.quiet  -- nobody waits (a report's hot path): not the aging
  end
  read_more_list('state', fields)
  if hand_over and queue_settled() and STATE.capacity ~= 0 and STATE.budgets == '' and STATE.capped == 0 then
    if rank and rank > 0 then read_more_list('config', PREPARE_READS.hand_over) end
  else
    read_more_list('config', PREPARE_CONFIG)
  end
  caps_config()
  if CONFIG.tenant_caps ~= '' then
    read_more('state', 'park_seq', unpack(VTIMES))  -- grant() parks, unpark() puts back at a class's vtime
  elseif NOW >= STATE.reclaim_due then
    read_more('state', unpack(VTIMES))  -- reclaim() prunes the shares by them
  end
  active_budgets()
  if STATE.capacity == 0 then
    read_more('state', unpack(PAUSE_FIELDS))
    read_more('config', 'resume_fraction')
  end
end
