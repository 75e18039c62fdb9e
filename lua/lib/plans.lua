--[[ lib/plans.lua: the read plans: what a call reads before its first write.

Uses lib/common.lua, lib/fields.lua, lib/budgets.lua, lib/shares.lua.
Defines: PAUSE_FIELDS, ADMIT, WRITE, REPORT, PREPARE_CONFIG, IDLE,
PREPARE_READS, PLANS, queue_settled, prepare.

A call reads every field its later steps may use before its first write
(a read after a write could fail it half-way: a stored value out of range,
a key of another type), and no more than its path needs (each field read
costs the call). The lists below are what the operations load first
(load() of lib/origin.lua) and what prepare() reads after, by path: made
once, at load, never changed. PLANS, at the end, is each operation's
plan, step by step: what it reads and checks, and where it writes.
]]

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

-- The plan of each operation: its steps in the order they run, each
-- named as the operation's "-- step:" line names it (the first, before
-- any such line, is 'the arguments'):
--   reads   the stored fields it reads: 'hash.field', or 'hash:<list>'
--           for a list above (or the expression that picks one)
--   checks  the library's calls that may fail it besides (an argument, a
--           stored value, a key's type), each reading what it needs
--   writes  true: it writes, and no step after it reads or checks (but
--           what `again` names); 'ends': it writes only on a path that
--           returns in that step; 'witnessed': checks and writes on
--           branches of their own, or checks repeated after a write:
--           its order, and that of every later step that checks, is the
--           write-order witness's (tests/support/write_order.py runs every
--           call of the model's random runs through it)
--   again   (with writes = true) what it and the steps after it may check
--           or read after its first write: checks it made before that write
--           too (guard and guard_grant: check_types() checked every key;
--           oversize: prepare() read its fields), and fields such a check
--           read: reading nothing new
-- (keyed by strings: an operation's name may be a fragment's function's)
-- tests/test_read_plans.py holds each operation's code to its plan.
local PLANS = {
  ['acquire'] = {
    {'the arguments', checks = {'arg_id', 'arg_label', 'arg_in', 'fail', 'arg_tokens', 'arg_place'}},
    {'the clock and the state', checks = {'clock', 'caps_config', 'keep_alive', 'prepare', 'check_types'},
      reads = {'state:waiting > 0 and PREPARE_READS.admit[place.rank + 1] or ADMIT'},
      writes = true, again = {'prepare', 'check_types', 'guard', 'guard_grant', 'oversize', 'config.log_length'}},
    {'the admission rule', checks = {'prepare', 'guard'}, writes = 'ends'},  -- a caller whose lease never fits
    {'a new lease, or a place in the queue', checks = {'prepare', 'guard_grant', 'oversize', 'guard'},
      reads = {'config.log_length'}, writes = 'witnessed'},  -- a lease, a denial, or a place in the queue
  },
  ['cancel'] = {
    {'the arguments', checks = {'arg_id'}},
    {'the state', checks = {'clock', 'prepare', 'keep_alive', 'guard_grant'}, reads = {'state:WRITE'}},
    {'the writes', writes = true},
  },
  ['init'] = {
    {'the arguments', checks = {'arg_id', 'arg_int', 'arg_in', 'parse_config'}},
    {'the keys', checks = {'clock', 'check_types'}},
    -- the state read, the config stored again, then every field read again
    {'a config or policy hash lost, stored again', checks = {'read_all'}, writes = 'witnessed'},
    {'a governor already there', checks = {'load_all'}, writes = 'witnessed'},
    {'a new state', checks = {'touch_all'}, writes = 'witnessed'},  -- every key and field checked after it is written
  },
  ['pause'] = {
    {'the arguments', checks = {'fail', 'arg_int'}},
    {'the state', checks = {'clock', 'check_types', 'load_all', 'keep_alive'}},
    {'the writes', writes = true},
  },
  ['probe'] = {
    {'the arguments'},
    {'the state', checks = {'clock', 'check_types', 'load_all', 'no_news', 'keep_alive'}},
    {'the writes', writes = true},
  },
  ['refresh'] = {
    {'the arguments', checks = {'arg_in', 'arg_id'}},
    {'the state', checks = {'clock', 'prepare', 'check_types', 'no_news', 'keep_alive'},
      reads = {'state:WRITE', 'state:unpack(VTIMES)'}},  -- (a lost place given back at its class's vtime)
    {'the writes', writes = true},
  },
  ['release'] = {
    {'the arguments', checks = {'arg_id'}},
    {'the queue', checks = {'arg_id', 'clock', 'prepare', 'keep_alive', 'guard_grant'}, reads = {'state:WRITE'}},
    {'the lease', checks = {'guard', 'arg_id'}, writes = true},
  },
  ['renew'] = {
    {'the arguments', checks = {'arg_in', 'fail', 'arg_id', 'arg_label', 'arg_place', 'arg_tokens'}},
    {'the state', checks = {'clock', 'keep_alive', 'prepare', 'check_types'}, reads = {'state:WRITE'}},
    {'the writes', writes = true},
  },
  ['report'] = {
    {'the arguments', checks = {'fail', 'arg_int', 'arg_id', 'arg_tokens'}},
    {'the clock and the state', checks = {'clock'}, reads = {'state:REPORT'}},
    {'the read plan', checks = {'the_policy', 'prepare', 'keep_alive'},
      reads = {'state.quota_exhausted', 'state.fence', 'config.retry_after_cap_ms', 'state.not_before',
        'state:budget_fields(kind)', 'config:kind .. _per_minute'}},
    {'the lease', checks = {'active_budgets', 'guard', 'guard_grant'}, writes = 'ends'},  -- a lease no longer live
    {'the window', checks = {'check_type', 'window', 'guard', 'guard_grant'}, reads = {'config:IDLE'}},
    {'the writes', writes = true},
  },
  ['reset'] = {
    {'the arguments', checks = {'parse_config'}},
    {'the state', checks = {'clock', 'check_types', 'load_all', 'keep_alive', 'window'}},
    {'the writes', writes = true},
  },
  ['resume'] = {
    {'the arguments', checks = {'fail'}},
    {'the state', checks = {'clock', 'check_types', 'load_all', 'keep_alive'}},
    {'the writes', writes = true},
  },
  ['set_max'] = {
    {'the arguments', checks = {'arg_int', 'fail'}},
    {'the state', checks = {'clock', 'check_types', 'load_all', 'keep_alive'}},
    {'the writes', writes = true},
  },
  ['set_shares'] = {
    {'the arguments', checks = {'arg_pairs', 'arg_int', 'fail'}},
    -- (fail: the reserve below the ceiling)
    {'the state', checks = {'clock', 'check_types', 'load_all', 'fail', 'keep_alive'}},
    {'the writes', writes = true},
  },
  ['spend'] = {
    {'the arguments', checks = {'fail', 'arg_id', 'spend_amounts', 'arg_int', 'spend_budgets'}},
    {'the state', checks = {'clock', 'spend_window', 'guard'}, reads = {'state.epoch', 'state.capacity', 'config.log_length', 'config.idle_ms'}},
    {'an approval', checks = {'fail'}, writes = 'ends'},
    {'a reservation', writes = true},
    {'a settlement', writes = true},
  },
  ['status'] = {
    {'the arguments'},
    {'the state', checks = {'clock', 'load_all'}},  -- (registered no-writes)
  },
}
