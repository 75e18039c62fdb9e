--[[ acquire.lua: ask for a lease; join the queue when it must wait.

Uses    lib/common.lua, lib/numbers.lua, lib/args.lua, lib/call.lua, lib/fields.lua,
        lib/records.lua, lib/budgets.lua, lib/shares.lua, lib/capacity.lua, lib/origin.lua,
        lib/plans.lua, lib/upkeep.lua, lib/admission.lua, lib/queue.lua
KEYS    the governor's keys, see lib/common.lua
ARGV
  ARGV[1] now           int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel       string        where grants to waiters are announced
  ARGV[3] id            string        lease id chosen by the caller (random)
  ARGV[4] holder        string        label shown to operators, <= 200 bytes
  ARGV[5] ttl_ms        LEASE_TTL ms  time to live of the lease
  ARGV[6] queue_ttl_ms  QUEUE_TTL ms  a waiter not refreshed within this is dropped
  ARGV[7] mode          'wait' | 'again' | 'try'
                        wait: join the queue if it must (the id was never
                        sent before); again: the same, for an id sent before
                        (answered 'granted' again if it was, its place
                        refreshed if queued); try: admitted now or denied
  ARGV[8] tokens        "input,output", "input,output,tier" or ''  the tokens
                        the lease reserves and the service tier it asks for
                        (governor.budgets.Tokens.arg): its cost in each budget
                        (a tier with budgets of its own, 'fast': its tokens
                        count in that tier's kinds, not the standard ones)
  ARGV[9] rank          int 0..6      the caller's priority class (0: the highest)
  ARGV[10] tenant       string        whose share it counts in, 1-64 of [A-Za-z0-9-_.:]
  ARGV[11] weight       int 1..1000   the tenant's weight (GovernorConfig.weight_of)
  ARGV[12] announce     '1' | '0'     '1': the call announces the lease TTL (ttl_max); '0': the
                        client announced it less than a third of it ago (absent: '1')
Reply
  {SCHEMA, 'granted', fence, remaining_ms, epoch, ttl_max}     remaining_ms: what the lease has left
  {SCHEMA, 'queued', position, reason, hint_ms, epoch, ttl_max}   (wait, again)
  {SCHEMA, 'denied', reason, hint_ms, epoch, ttl_max}             (try)
  {SCHEMA, 'refused', reason, epoch, ttl_max}   the cost is above a budget's whole limit:
                                  it can never be admitted (any mode)
  ttl_max: the longest lease TTL clients announced lately (ms, the caller's
  included: lib/origin.lua note_ttl), so that every client knows how long a
  state it re-creates must hold; '' when the call does not announce (a rise
  reaches listening clients on the wake channel)
  {SCHEMA, 'missing'}    no such governor: run init.lua, then call again
  position counts from 0 (a waiter parked at its tenant's cap: -1)
  length); hint_ms > 0 is when asking again may pay off; reason is the
  admission rule's (blocked() of lib/admission.lua).
Nobody waiting and room: admitted at once. A waiter's place in the queue
is its class's band and its fair-queueing tag (lib/queue.lua enqueue).
]]

local id = arg_id(3, 'id')
local holder = arg_label(4)
local ttl = arg_in(5, 'ttl_ms')
local queue_ttl = arg_in(6, 'queue_ttl_ms')
local mode = ARGV[7]
if mode ~= 'wait' and mode ~= 'again' and mode ~= 'try' then
  fail('BADARG', 'mode must be wait, again or try, got ' .. tostring(mode))
end
local tokens = arg_tokens(8, 'tokens')
local place = arg_place(9)
local announce = ARGV[12] ~= '0'
if ARGV[12] and ARGV[12] ~= '0' and ARGV[12] ~= '1' then
  fail('BADARG', 'announce must be 1 or 0, got ' .. tostring(ARGV[12]))
end
-- step: the clock and the state
clock()
-- Live waiters (dead ones never count) first: when callers wait, what a
-- newcomer joining them reads of the state comes with the admission's
-- fields, in one HMGET. (No waiters key, or no governor: 0.)
local waiting = redis.call('ZCOUNT', KEY.waiters, LIVE, '+inf')
if not load(waiting > 0 and PREPARE_READS.admit[place.rank + 1] or ADMIT, announce) then return missing_reply() end
-- The reserve and the tenants' caps are in the admission rule: read while
-- caps or a reserve are set (capped), or while the budgets' rule asks a tenant's cap.
if STATE.capped ~= 0 or STATE.budgets ~= '' then caps_config() end
keep_alive()
-- The caller is alive: its TTL counts, and an announcing caller learns the
-- longest (a rise is published to every listening client: note_ttl); one
-- that announced lately has it counted still (its grant below need not
-- announce it).
local ttl_max = ''
if announce then
  note_ttl(ttl)
  ttl_max = STATE.ttl_max
else
  CALL.ttl_noted = ttl
end
if not redis.call('ZRANK', KEY.leases, SENTINEL) then
  -- leases lost while the state stayed: found before anything is admitted (lib/origin.lua)
  prepare()
  check_types()
  reclaim(true)
end
if STATE.capacity == 0 then
  -- Paused: a pause whose time is up lifts here too.
  prepare()
  check_types()
  recover()
end

local in_queue = false
if mode == 'again' then
  local expiry = tonumber(redis.call('ZSCORE', KEY.leases, id))
  if expiry and expiry > NOW then
    local holder_record = record_parse(redis.call('HGET', KEY.holders, id))
    return finish({SCHEMA, 'granted', (holder_record and holder_record.fence or 0), expiry - NOW, STATE.epoch,
      ttl_max})
  end
  in_queue = redis.call('ZRANK', KEY.queue, id) ~= false or redis.call('ZRANK', KEY.parked, id) ~= false
end

-- step: the admission rule
local impossible = never_fits(tokens)
if impossible then
  if in_queue then
    prepare()
    guard(KEY.waiters, KEY.holders, KEY.aging)  -- (queue and parked were read by ZSCORE)
    redis.call('ZREM', KEY.queue, id)
    redis.call('ZREM', KEY.parked, id)
    redis.call('ZREM', KEY.waiters, id)
    if STATE.aging_due > 0 then redis.call('ZREM', KEY.aging, id) end
    redis.call('HDEL', KEY.holders, id)
  end
  return finish({SCHEMA, 'refused', impossible, STATE.epoch, ttl_max})
end

-- step: a new lease, or a place in the queue
local reason, hint, ruled = nil, 0, false  -- the rule's answer for the caller, once asked
if in_queue then
  prepare()
  guard_grant(false, KEY.waiters, KEY.holders, KEY.leases)  -- (and what grant() adds): written after this write
  redis.call('ZADD', KEY.waiters, int(NOW + queue_ttl), id)
else
  reason, hint = blocked(tokens, place)
  ruled = true
  if waiting == 0 and not reason then
    -- Nobody waits and the rule admits: at once (FIFO holds trivially).
    if STATE.budgets ~= '' and oversize(tokens) then  -- add_lease logs it
      read_more('config', 'log_length')
      guard(KEY.events)
    end
    return finish({SCHEMA, 'granted', add_lease(id, ttl, holder, tokens, place), ttl, STATE.epoch, ttl_max})
  end
  if mode == 'try' then
    return finish({SCHEMA, 'denied', reason or 'earlier callers are queued', hint, STATE.epoch, ttl_max})
  end
  prepare(true, place.rank, waiting > 0)  -- (a first waiter creates the queue: the idle time)
  -- waiters was read by ZCOUNT, leases by blocked() when it counted them,
  -- shares by enqueue's ZSCORE before its first write (the holder record:
  -- the write tells holders' type); aging when the caller will age
  if CALL.live then
    guard_grant(place.rank > 0 and CONFIG.aging_ms > 0, KEY.queue)
  else
    guard_grant(place.rank > 0 and CONFIG.aging_ms > 0, KEY.queue, KEY.leases)
  end
  enqueue(id, place, record_format('0', ttl, NOW, tokens, 0, place.rank, place.tenant, holder))
  redis.call('ZADD', KEY.waiters, int(NOW + queue_ttl), id)
  if waiting == 0 then created(KEY.queue) created(KEY.waiters) end
end

-- (A rule that answers every caller alike and turned this one away with
-- no time to wait for admits nobody from the head either: grant() would
-- stop at once, unless waiters are due to age.)
local granted = nil
if not (ruled and reason and hint == 0 and alike()) or (STATE.aging_due > 0 and NOW >= STATE.aging_due) then
  granted = grant(id)
  if granted[id] then
    return finish({SCHEMA, 'granted', granted[id], ttl, STATE.epoch, ttl_max})
  end
end
-- (what the rule said still holds unless grant() admitted somebody)
if not ruled or (granted and next(granted) ~= nil) then reason, hint = blocked(tokens, place) end
local position = redis.call('ZRANK', KEY.queue, id) or -1  -- parked at its tenant's cap: -1
return finish({SCHEMA, 'queued', position, reason or 'behind earlier waiters', hint, STATE.epoch, ttl_max})
