--[[ report.lua: one outcome of a provider call; feeds the window and policy.

Uses    lib/common.lua, lib/args.lua, lib/call.lua, lib/fields.lua, lib/decisions.lua,
        lib/records.lua, lib/budgets.lua, lib/shares.lua, lib/origin.lua, lib/plans.lua,
        lib/upkeep.lua, lib/queue.lua, lib/policy.lua
KEYS    the governor's keys, see lib/common.lua
ARGV
  ARGV[1] now             int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel         string        where grants to waiters are announced
  ARGV[3] outcome         's' success | 'r' rate-limited | 'e' other error
                          | 'q' quota exhausted (recorded, never a policy input)
                          | 'b' refused, no load signal (an overload, a 529): the
                          adaptive policy's background, no hold, no clamp; 'r'
                          to other policies (Outcome, BACKGROUND_REFUSAL)
  ARGV[4] retry_after_ms  int ms or ''  'r': the provider's Retry-After; sets the
                          fleet-wide not_before, capped at retry_after_cap_ms;
                          'q': when a per-day quota comes back (logged,
                          and kept as the state's quota_until)
  ARGV[5] lease           string or ''  the reporting lease; one no longer live is
                          fenced off and changes nothing (its news may be stale)
  ARGV[6] fence           int or ''     the fence of the lease the call ran under
                          (also for a lease released before its report)
  ARGV[7] release         '1' | '0'     '1': also release the lease (one call
                          instead of report then release)
  ARGV[8] usage           "input,output[,tier]" or ''  the tokens the call used,
                          the tier that served it (Tokens.arg; none: the tier
                          asked): settle the live lease's reservation
  ARGV[9] refusals        '0' | '1' | ''  ('r', 'b') '0': the provider does not
                          count a refused call against its limits, so its
                          reservation is given back by the usage; else it is
                          spent (never given back). Either way ('r' only) every
                          bucket whose remaining the figures do not announce
                          is then clamped to 0 (refused() of lib/budgets.lua)
  ARGV[10..] limits       kind, "limit,remaining" pairs, one per budget kind
                          (BUDGET_KINDS) the response announced: its
                          rate-limit figures (either may be empty;
                          governor/headers.py reads them), which calibrate
                          that budget (calibrate() of lib/budgets.lua)
Reply
  {SCHEMA, 'reported'}  recorded (and the lease released if asked)
  {SCHEMA, 'lost'}      the lease was not live: nothing recorded (any remains of
                   it are removed when a release was asked)
  {SCHEMA, 'missing'}   no such governor: run init.lua, then call again
]]

-- The arguments, checked. Out: outcome, retry_after (ms or nil), lease and
-- fence (or nil), release, usage (or nil), refusals, limits (the figures).
local outcome = ARGV[3]
if outcome ~= 's' and outcome ~= 'r' and outcome ~= 'e' and outcome ~= 'q' and outcome ~= 'b' then
  fail('BADARG', 'outcome must be s, r, e, q or b, got ' .. tostring(outcome))
end
local retry_after = nil
if ARGV[4] ~= '' then retry_after = arg_int(4, 'retry_after_ms') end
local lease, fence = nil, nil
if ARGV[5] ~= '' then lease = arg_id(5, 'lease') end
if ARGV[6] ~= '' then fence = arg_int(6, 'fence', 0, true) end
local release = lease ~= nil and ARGV[7] == '1'
local usage = nil
if ARGV[8] ~= nil and ARGV[8] ~= '' then usage = arg_tokens(8, 'usage') end
local refusals = ARGV[9]
if refusals ~= nil and refusals ~= '' and refusals ~= '0' and refusals ~= '1' then
  fail('BADARG', 'refusals must be 0, 1 or empty, got ' .. tostring(refusals))
end
local limits = NO_LIMITS  -- {kind, limit or nil, remaining or nil}
if #ARGV > 9 then limits = {} end
if #ARGV > 9 and (#ARGV - 9) % 2 ~= 0 then fail('BADARG', 'report takes its limits as (kind, "limit,remaining") pairs') end
for i = 10, #ARGV, 2 do
  local kind, v = ARGV[i], ARGV[i + 1]
  if not KIND_OF[kind] or (limits[kind]) then
    fail('BADARG', 'limits name each budget kind at most once, one of ' .. table.concat(BUDGET_KINDS, ', ')
      .. ', got ' .. tostring(kind))
  end
  local l, r = string.match(v, '^(%d*),(%d*)$')
  local limit, remaining = tonumber(l), tonumber(r)
  if not l or (l == '' and r == '') or (limit or 0) > MAX_INT or (remaining or 0) > MAX_INT then
    fail('BADARG', kind .. ' limits must be "limit,remaining" integers (either empty), got ' .. tostring(v))
  end
  limits[kind] = true
  limits[#limits + 1] = {kind, limit, remaining}
end
-- step: the clock and the state
-- In: the arguments. Out: STATE (REPORT's fields, or the 'missing' reply)
-- and `waiting`: callers are queued (or parked), so the call may grant.
clock()
if not load(REPORT) then return missing_reply() end
-- reads: they tell the queue's and parked's types (parked holds waiters only while caps are set)
local waiting = redis.call('ZCARD', KEY.queue) > 0 or (STATE.capped == 1 and redis.call('ZCARD', KEY.parked) > 0)
-- step: the read plan
-- In: outcome, limits, waiting. Out: `policy` (its config and state),
-- `quiet` (a quiet success: the policy looks at no count), every field
-- the later steps use (nothing is read after the first write), and
-- `head`, the queue's head when it is read now.
local policy, quiet = the_policy(outcome)
if outcome == 'b' and not policy.background then outcome = 'r' end  -- no rule for it: a refusal as any
-- A quiet success (the policy's common case) with nothing due and no
-- figures to calibrate writes no log and reads no more config (the keys'
-- idle time only if the window's key is new); with callers queued, what
-- its grant reads (prepare(): a hand-over's, nothing else being due).
quiet = quiet and NOW < STATE.reclaim_due and #limits == 0
if waiting then
  prepare(true, nil, quiet)
elseif not quiet then
  prepare(false)
end
if outcome == 'q' then read_more('state', 'quota_exhausted') end
if outcome == 'r' or outcome == 'b' then read_more('state', 'fence') end  -- a cut remembers the fence it was made at
if retry_after then
  read_more('config', 'retry_after_cap_ms')
  read_more('state', 'not_before')
end
for i = 1, #limits do
  local kind = limits[i][1]
  read_more('state', budget_fields(kind))
  read_more('config', kind .. '_per_minute')
end
keep_alive()
-- With callers queued and nothing due that could change the queue before
-- the grant (reclaim, aging, a parked waiter back: caps), the head is read
-- now: grant() starts from it, and the reads tell the waiters' and
-- holders' types. head (nil: not read; grant() reads it itself):
--   entry     its ZRANGE reply (id, score)
--   deadline  its score in waiters
--   record    its holder record, as stored
local head = nil
if waiting and queue_settled() and STATE.capped == 0 then
  head = {entry = redis.call('ZRANGE', KEY.queue, '0', '0', 'WITHSCORES')}
  head.deadline = redis.call('ZSCORE', KEY.waiters, head.entry[1])
  head.record = redis.call('HGET', KEY.holders, head.entry[1])
end
-- step: the lease
-- In: lease, release, usage, quiet, waiting, head. Out: `the_lease`, what
-- the call found of the reporting lease (the later steps read it), or the
-- call ends here ('lost') when the lease is no longer live:
--   settles  its reservation is settled by the usage (budgets are on)
--   counted  held counts it and a release takes it out (caps on, held there)
--   record   its holder record, parsed: read when it settles or is counted
--   back     how it goes back when a release is asked (nil: not asked, or
--            given back already):
--     'first'   a quiet success with nobody waiting, its record unread: it
--               goes first, its HDEL the call's first write (telling
--               holders' type): a quiet success changes nothing a lease
--               given back first could change
--     'record'  with its holder record (read, or a head read: holders'
--               type told; or HEXISTS found one)
--     'bare'    without (HEXISTS found none: a queued id keeps its place)
-- Types: the hashes were read; the zsets are read below before any write
-- (ZCARD queue, ZSCORE leases when a lease reports, ZCOUNT in window(), or TYPE),
-- holders by HEXISTS (or, a quiet success giving a live lease back, by
-- HDEL, its first write); events, waiters and (with no lease) leases guarded.
local the_lease = {settles = lease and usage and #active_budgets() > 0}
the_lease.counted = release and STATE.capped == 1 and redis.call('EXISTS', KEY.held) == 1  -- held counts only then
if the_lease.counted then guard(KEY.held) end
-- (a refusal reported without usage clamps the budgets of the lease's
-- tier, which its record names: read too)
local tier_asked = outcome == 'r' and lease and not usage and #active_budgets() > 0
if the_lease.settles or the_lease.counted or tier_asked then
  the_lease.record = record_parse(redis.call('HGET', KEY.holders, lease))
end
if release then
  if quiet and the_lease.record == nil and not waiting then
    the_lease.back = 'first'
  elseif the_lease.record ~= nil or head ~= nil or redis.call('HEXISTS', KEY.holders, lease) == 1 then
    the_lease.back = 'record'
  else
    the_lease.back = 'bare'
  end
end

-- The lease given back (once): out of leases, its record out of holders,
-- its counts out of held. Given back first, a live lease's record goes
-- first: its own (a queued id has none in leases), and HDEL, the call's
-- first write, tells holders' type.
local function give_back()
  if the_lease.back == 'first' then
    redis.call('HDEL', KEY.holders, lease)
    the_lease.back = 'bare'
  end
  if the_lease.back and redis.call('ZREM', KEY.leases, lease) == 1 then
    if the_lease.back == 'record' then redis.call('HDEL', KEY.holders, lease) end
    if the_lease.counted then held_remove(the_lease.record, waiting) end
  end
  the_lease.back = nil
end

if lease then
  local expiry = tonumber(redis.call('ZSCORE', KEY.leases, lease))
  if not expiry or expiry <= NOW then
    if waiting then guard_grant(false, KEY.waiters, KEY.holders) end  -- (and what grant() adds)
    -- (not live: HEXISTS says whether it has a record; a queued id keeps its place)
    if the_lease.back == 'first' then
      the_lease.back = redis.call('HEXISTS', KEY.holders, lease) == 1 and 'record' or 'bare'
    end
    give_back()
    if waiting then grant() end  -- its tenant's first parked waiter may be back in the queue
    return finish({SCHEMA, 'lost'})
  end
end

-- step: the window
-- In: quiet, outcome, lease, release, waiting, head. Out: the window's
-- counts for the policy (`rate_limited`, `total`; `fresh`: its key is
-- new), and every key the writes may touch checked (guarded).
-- (A quiet success's policy looks at no count: TYPE says whether the
-- window's key is new, and its type.)
local rate_limited, total, fresh
if quiet then
  fresh = check_type(KEY.attempts, 'zset') == 'none'
  if fresh then read_more_list('config', IDLE) end  -- the new key's expiry (finish)
elseif outcome ~= 'q' then
  rate_limited, total = window()  -- reads tell the window keys' types
  fresh = total == 0
end
if not quiet then guard(KEY.events) end  -- the policy may log after the first write
if not lease then guard(KEY.leases) end  -- the policy and grant() count it after the first write
if head then
  guard_grant(false)  -- what grant() adds (the head's reads told waiters and holders)
elseif waiting then
  guard_grant(false, KEY.waiters)  -- (and what grant() adds): written by grant()
  if not release then guard(KEY.holders) end  -- grant() reads the head's record (else HEXISTS told)
end
-- step: the writes
-- In: all of the above. Out: the outcome recorded (the policy, a hold, a
-- quota), the lease's reservation settled and the budgets calibrated, the
-- lease given back, the queue granted; the 'reported' reply.
if the_lease.back == 'first' then give_back() end  -- (a quiet success, nobody waiting: none of the guards above ran)
reclaim()
if outcome == 'q' then
  set('state', 'quota_exhausted', STATE.quota_exhausted + 1)
  set('state', 'quota_at', NOW)
  set('state', 'quota_until', retry_after and NOW + retry_after or 0)
  if retry_after then
    log('quota', 'count', STATE.quota_exhausted, 'until', NOW + retry_after,
      'why', 'provider reported a per-day quota used up (not a throttle)')
  else
    log('quota', 'count', STATE.quota_exhausted,
      'why', 'provider reported its quota exhausted (billing, not a throttle)')
  end
else
  local holds = record(policy, outcome, fence, rate_limited, total, fresh)
  if outcome == 'r' and retry_after and holds then
    -- The provider asked the whole fleet to hold, and the policy read the
    -- refusal as the fleet's (a refused probe, the provider's background:
    -- only the caller waits; record() of lib/policy.lua).
    local until_ms = NOW + math.min(retry_after, CONFIG.retry_after_cap_ms)
    if until_ms > STATE.not_before then
      set('state', 'not_before', until_ms)
      log('hold', 'until', until_ms, 'why', 'provider retry-after ' .. retry_after .. ' ms')
    end
  end
end
if the_lease.settles and the_lease.record then
  settle(the_lease.record.tokens, usage, (outcome == 'r' or outcome == 'b') and refusals ~= '0')
end
local announced = outcome == 'r' and {} or nil  -- (a refusal's) the kinds whose remaining the provider told
for i = 1, #limits do
  local figures = limits[i]
  calibrate(figures[1], figures[2], figures[3])
  if figures[3] and announced then announced[figures[1]] = true end
end
if outcome == 'r' then  -- a refusal is information, not a refund: of the tier that refused
  refused(announced, (usage and usage.tier) or (the_lease.record and the_lease.record.tokens.tier) or '')
end
give_back()
if head then grant(nil, head.entry, head.deadline, head.record) elseif waiting then grant() end
return finish({SCHEMA, 'reported'})
