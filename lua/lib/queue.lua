--[[ lib/queue.lua: the queue: enqueue, aging, grants.

Uses lib/common.lua, lib/numbers.lua, lib/args.lua, lib/fields.lua, lib/decisions.lua,
lib/records.lua, lib/budgets.lua, lib/shares.lua, lib/origin.lua, lib/admission.lua.
Defines: enqueue, guard_grant, age, grant.

The queue (governor.protocol.QUEUE_BAND): a waiter's score is band *
QUEUE_BAND + tag, band 0 for the aged, rank + 1 for its class, so the head
is the highest class's smallest tag. Tags are start-time fair queueing
within each class: a waiter of tenant t (weight w) in class r starts at
max(vtime_r, F), F the finish tag of "r:t" in the shares zset (scored r *
QUEUE_BAND + F), which moves on by ceil(QUANTUM / w), and a grant moves
its class's vtime_r up to its tag: FIFO within a class and tenant, tenants
granted in proportion to their weights, an idle tenant back at vtime_r (no
credit hoarded). Each class keeps its own virtual time, so one class's
grants never reset another's shares. A waiter of a lower class that waited
aging_ms goes to band 0 with its tag (age()).
]]

-- A new waiter joins the queue, its holder record (entry) first: the
-- call's first write (the caller has guarded queue and aging). Its tag
-- starts at max(vtime, the finish tag of its tenant in its class), which
-- moves on by the tenant's quantum; a waiter of a lower class waits to age.
local function enqueue(id, place, entry)
  local vtime = VTIMES[place.rank + 1]
  read_more('state', vtime)  -- read by prepare(_, rank) already; before the call's first write, as every read
  local share, base = place.share, place.rank * QUEUE_BAND  -- fair within a class
  local finish = tonumber(redis.call('ZSCORE', KEY.shares, share))  -- before the first write: it tells the type
  if not finish then read_more('config', 'idle_ms') end  -- the new key's expiry (finish), read before the first write
  redis.call('HSET', KEY.holders, id, entry)
  local start = math.max(STATE[vtime], (finish or base) - base)
  redis.call('ZADD', KEY.shares, int(base + start + place.step), share)
  if not finish then created(KEY.shares) end
  redis.call('ZADD', KEY.queue, int((place.rank + 1) * QUEUE_BAND + start), id)
  if place.rank > 0 and CONFIG.aging_ms > 0 then
    local due = NOW + CONFIG.aging_ms
    redis.call('ZADD', KEY.aging, int(due), id)
    if STATE.aging_due == 0 then created(KEY.aging) end
    if STATE.aging_due == 0 or due < STATE.aging_due then set('state', 'aging_due', due) end
  end
end

-- guard(...), and the keys grant() may write beyond them: aging while some
-- waiter waits to age (or when `ages`: the call adds one), events when one
-- is due now (age() logs) or a header's limit may make a grant oversize
-- (add_lease logs). Needs prepare().
local function guard_grant(ages, ...)
  local plain = STATE.aging_due == 0 and CONFIG.tenant_caps == '' and CONFIG.reserve == 0
  if not ages and plain and not announced_budgets() then
    guard(...)  -- (the common case: nothing beyond the keys named)
    return
  end
  local keys = {...}
  if ages or STATE.aging_due > 0 then keys[#keys + 1] = KEY.aging end
  if CONFIG.tenant_caps ~= '' or CONFIG.reserve > 0 then  -- parked waiters leave parked and aging
    keys[#keys + 1] = KEY.held
    keys[#keys + 1] = KEY.parked
    keys[#keys + 1] = KEY.aging
  end
  if (STATE.aging_due > 0 and NOW >= STATE.aging_due) or announced_budgets() then keys[#keys + 1] = KEY.events end
  guard(unpack(keys))
end

-- Waiters that waited aging_ms go ahead of every class (band 0), keeping
-- their tags, at most BATCH per call; one decision-log entry says so.
-- Needs prepare().
local function age()
  if STATE.aging_due == 0 or NOW < STATE.aging_due then return end
  local due = redis.call('ZRANGEBYSCORE', KEY.aging, '-inf', NOW, 'LIMIT', 0, BATCH)
  local moved, first = 0, nil
  for _, id in ipairs(due) do
    local score = tonumber(redis.call('ZSCORE', KEY.queue, id))
    if score and score >= QUEUE_BAND then
      redis.call('ZADD', KEY.queue, score % QUEUE_BAND, id)
      moved = moved + 1
      first = first or id
    end
  end
  if #due > 0 then redis.call('ZREM', KEY.aging, unpack(due)) end
  local next_due = redis.call('ZRANGE', KEY.aging, 0, 0, 'WITHSCORES')[2]
  set('state', 'aging_due', next_due and tonumber(next_due) or 0)
  if moved > 0 then
    local holder_record = record_parse(redis.call('HGET', KEY.holders, first))
    log('age', 'waiters', moved, 'holder', holder_record and holder_record.holder or '', 'after_ms', CONFIG.aging_ms,
      'why', 'waited aging_ms: ahead of every class now')
  end
end

-- Admit waiters from the head of the queue while the rule lets them in, at
-- most BATCH per call (a capacity rise under a long queue is admitted over
-- the next calls: every refresh, release and report grants), and announce
-- the grants on CHANNEL as "epoch id:fence id:fence ..." (all but
-- `caller`, who learns of its grant from the reply). Returns id -> fence.
-- Held back by a hold or a timed pause with callers queued, it announces
-- "epoch @ms" instead: ask again in ms, when the time is up (nothing else
-- may happen then to grant them: the holders may all be done by then).
-- `read_head`, `read_deadline` and `read_record`: the queue's head (ZRANGE
-- ... WITHSCORES), its deadline (ZSCORE of waiters) and its holder record
-- (HGET) as the caller read them before its first write, when nothing it
-- ran since can have changed them (release).
-- Needs prepare(); the caller has guarded waiters, holders, leases, aging.
local function grant(caller, read_head, read_deadline, read_record)
  age()
  local granted = {}
  local words = {}
  local skipped, admitted = 0, 0
  local capped = CONFIG.tenant_caps ~= ''
  while skipped <= BATCH and admitted < BATCH do
    -- The rule without a place is never stricter than the head's (its class
    -- only adds the reserve): when it holds everybody back and nothing is
    -- to be announced (a grant made, or no time to wait for), the head is
    -- not looked at. (After a grant, a plain governor at capacity needs
    -- no asking: the rule's reason would be worded for nobody.)
    if admitted > 0 and alike() and CALL.live >= STATE.capacity then break end
    local none, wait, by = blocked(NO_TOKENS)
    -- (a bucket of the standard tier's holds no lease of a tier apart: with
    -- such a tier's budgets on, the head is asked for its own tokens)
    local tiered = by and by.bucket and active_budgets().apart
    if none and not tiered and (admitted > 0 or wait == 0) then break end
    local first, known, head_record = read_head, read_deadline, read_record
    read_head, read_deadline, read_record = nil, nil, nil  -- (the first round's alone)
    if not first then first = redis.call('ZRANGE', KEY.queue, '0', '0', 'WITHSCORES') end
    local head = first[1]
    if not head then break end
    local score = tonumber(first[2])
    -- pause, hold, concurrency (the class from the band): no record needed
    -- (with no budget, cap or reserve the class changes nothing: the answer above)
    local band = math.floor(score / QUEUE_BAND)
    local why, hint, budget = none, wait, by
    if not alike() then
      why, hint, budget = blocked(NO_TOKENS, {rank = math.max(band - 1, 0), aged = band == 0})
    end
    local holder_record, impossible = nil, nil
    if not why or (budget and budget.bucket and active_budgets().apart) then
      holder_record = record_parse(head_record or redis.call('HGET', KEY.holders, head))
      if holder_record and (capped or #active_budgets() > 0) then
        impossible = never_fits(holder_record.tokens)
        if not impossible then
          why, hint, budget = blocked(holder_record.tokens,
            {rank = holder_record.rank, tenant = holder_record.tenant, aged = band == 0})
        end
      end
    end
    if why and budget and budget.park then
      -- Its tenant is at its cap: it waits parked, the next is asked.
      local _, slot = cap_of(holder_record.tenant)
      set('state', 'park_seq', STATE.park_seq + 1)
      redis.call('ZREM', KEY.queue, head)
      redis.call('ZADD', KEY.parked, slot * PARK_SLOT + STATE.park_seq, head)
      created(KEY.parked)
      skipped = skipped + 1
    elseif why then
      if hint > 0 and admitted == 0 then redis.call('PUBLISH', CHANNEL, STATE.epoch .. ' @' .. int(hint)) end
      break
    else
      local deadline = tonumber(known or redis.call('ZSCORE', KEY.waiters, head))
      redis.call('ZREM', KEY.queue, head)
      redis.call('ZREM', KEY.waiters, head)
      if score >= QUEUE_BAND and holder_record and holder_record.rank > 0 and STATE.aging_due > 0 then
        redis.call('ZREM', KEY.aging, head)
      end
      if impossible then
        -- A budget's limit fell below its cost: its refresh is refused (acquire again).
        redis.call('HDEL', KEY.holders, head)
        redis.call('PUBLISH', CHANNEL, STATE.epoch .. ' @' .. 1)  -- ask again now
        skipped = skipped + 1
      elseif deadline and deadline > NOW and holder_record then
        -- Its client announced its TTL at most a third of it before it
        -- queued (note_ttl of lib/origin.lua), counted for twice the TTL:
        -- through the lease when granted within half of it; a longer wait
        -- announces it here.
        if NOW - holder_record.since > holder_record.ttl / 2 then note_ttl(holder_record.ttl) end
        local fence, digits = add_lease(head, holder_record.ttl, holder_record.holder, holder_record.tokens,
          holder_record)
        granted[head] = fence
        -- A class's grants come in tag order (the head is its smallest tag, and
        -- a newcomer starts at vtime at least), so its vtime is the last one's
        -- tag, written without a read; an aged waiter's older tag leaves it.
        local vtime = VTIMES[holder_record.rank + 1]
        if vtime and score >= QUEUE_BAND then set('state', vtime, score % QUEUE_BAND) end
        if head ~= caller then words[#words + 1] = head .. ':' .. digits end
        admitted = admitted + 1
      else
        redis.call('HDEL', KEY.holders, head)
        skipped = skipped + 1
      end
    end
  end
  if #words > 0 then
    redis.call('PUBLISH', CHANNEL, STATE.epoch .. ' ' .. table.concat(words, ' '))
  end
  return granted
end
