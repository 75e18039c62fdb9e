--[[ refresh.lua: the waiters' safety net; one call per process per poll.

Keeps the places of a batch of waiters, runs the time-driven recovery
probe (a pause whose window drained lifts here even when no one reports)
and the policy's growth by time (no_news of lib/policy.lua: waiters at a
full capacity with nothing refused), admits whom it can, and tells each
waiter where it stands, so a lost pub/sub message costs at most one poll
interval.

Uses    lib/common.lua, lib/numbers.lua, lib/args.lua, lib/call.lua, lib/fields.lua, lib/decisions.lua,
        lib/records.lua, lib/shares.lua, lib/capacity.lua, lib/origin.lua, lib/plans.lua, lib/upkeep.lua,
        lib/admission.lua, lib/queue.lua, lib/policy.lua
KEYS    the governor's keys, see lib/common.lua
ARGV
  ARGV[1] now           int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel       string        where grants to waiters are announced
  ARGV[3] queue_ttl_ms  QUEUE_TTL ms  new deadline of each waiter's place
  ARGV[4..] ids         string        the waiters of one process
Reply
  {SCHEMA, 'refreshed', epoch, reason, hint_ms, status1, value1, ms1, why1, ...}
    status = 'granted' (value: the lease's fence, ms: left, why '')
           | 'queued' (value: waiters ahead of it, -1 parked at its tenant's
             cap; ms: when asking again may pay off, 0: no idea; why: what
             holds it, in the admission rule's words for its own cost and place)
           | 'unknown' (0, 0, '': not queued, not granted; enqueue again)
    (a live waiter whose queue or parked entry was lost takes its turn
    again first, ahead of later waiters, and is logged: 'repair')
    reason: the admission rule's for a new caller of no cost, '' when it
    would be admitted
  {SCHEMA, 'missing'}    no such governor: run init.lua, then call again
]]

local queue_ttl = arg_in(3, 'queue_ttl_ms')
for i = 4, #ARGV do arg_id(i, 'id') end
-- step: the state
clock()
if not load(WRITE) then return missing_reply() end
prepare()
check_types()  -- one call per process per poll: cheap enough to check all
local grow = no_news()
-- A live waiter with no place (its queue or parked entry lost: evicted,
-- deleted) would wait for ever: it takes its turn again, before the
-- waiters who came after it (replace of lib/shares.lua), before the grants.
local placeless = {}
for i = 4, #ARGV do
  local id = ARGV[i]
  if not redis.call('ZRANK', KEY.queue, id) and not redis.call('ZRANK', KEY.parked, id)
      and (tonumber(redis.call('ZSCORE', KEY.waiters, id)) or 0) > NOW then
    placeless[#placeless + 1] = id
  end
end
if #placeless > 0 then read_more('state', unpack(VTIMES)) end  -- requeue's, before the first write
keep_alive()

-- step: the writes
reclaim()
recover()
if grow then grow() end
for _, id in ipairs(placeless) do
  if not redis.call('ZRANK', KEY.queue, id) and not redis.call('ZRANK', KEY.parked, id) then replace(id) end
end
if #placeless > 0 then
  log('repair', 'waiters', #placeless, 'why', 'waiter(s) whose place was lost (key queue or parked evicted or '
    .. 'deleted): queued again ahead of later waiters')
end
local granted = grant()
local reason, hint = blocked(NO_TOKENS)
local reply = {SCHEMA, 'refreshed', STATE.epoch, reason or '', hint}
local deadline = int(NOW + queue_ttl)  -- (a string: Redis formats a number sent to it with "%.17g")
for i = 4, #ARGV do
  local id = ARGV[i]
  if granted[id] then
    reply[#reply + 1] = 'granted'
    reply[#reply + 1] = granted[id]
    reply[#reply + 1] = tonumber(redis.call('ZSCORE', KEY.leases, id)) - NOW
    reply[#reply + 1] = ''
  elseif redis.call('ZRANK', KEY.queue, id) or redis.call('ZRANK', KEY.parked, id) then
    -- queued only with a place: its deadline (a lost waiters entry too)
    redis.call('ZADD', KEY.waiters, deadline, id)
    local why, wait = waiting_on(id)
    reply[#reply + 1] = 'queued'
    reply[#reply + 1] = redis.call('ZRANK', KEY.queue, id) or -1
    reply[#reply + 1] = wait
    reply[#reply + 1] = why
  else
    local expiry = tonumber(redis.call('ZSCORE', KEY.leases, id))
    if expiry and expiry > NOW then
      local holder_record = record_parse(redis.call('HGET', KEY.holders, id))
      reply[#reply + 1] = 'granted'
      reply[#reply + 1] = (holder_record and holder_record.fence or 0)
      reply[#reply + 1] = expiry - NOW
      reply[#reply + 1] = ''
    else
      reply[#reply + 1] = 'unknown'
      reply[#reply + 1] = 0
      reply[#reply + 1] = 0
      reply[#reply + 1] = ''
    end
  end
end
return finish(reply)
