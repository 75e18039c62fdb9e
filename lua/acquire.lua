--[[ acquire.lua: ask for a lease; join the FIFO queue when it must wait.

Uses    lib/admission.lua (after lib/common.lua)
KEYS    the governor's eight keys, see lib/common.lua
ARGV
  ARGV[1] now           int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel       string        where grants to waiters are announced
  ARGV[3] id            string        lease id chosen by the caller (random)
  ARGV[4] holder        string        label shown to operators, <= 200 bytes
  ARGV[5] ttl_ms        int ms >= 1   time to live of the lease
  ARGV[6] wait          '1' | '0'     '1' join the queue, '0' try only
  ARGV[7] queue_ttl_ms  int ms >= 1   a waiter not refreshed within this is dropped
  ARGV[8] fresh         '1' | '0'     '1': the id was never sent before (skips
                                      the idempotency lookups)
Reply
  {1, 'granted', fence, remaining_ms, epoch}     remaining_ms: what the lease has left
  {1, 'queued', position, reason, hint_ms, epoch}   (wait = '1')
  {1, 'denied', reason, hint_ms, epoch}             (wait = '0')
  {1, 'missing'}    no such governor: run init.lua, then call again
  position counts from 0; hint_ms > 0 is when asking again may pay off.
Idempotent per id: a granted id is answered 'granted' again; a queued id
has its place refreshed. Nobody waiting and room: admitted at once.
]]

want('ticket')
local id = arg_id(3, 'id')
local holder = ARGV[4]
local ttl = arg_int(5, 'ttl_ms', 1)
local wait = ARGV[6] == '1'
local queue_ttl = arg_int(7, 'queue_ttl_ms', 1)
local fresh = ARGV[8] == '1'
if #holder > 200 then fail('BADARG', 'holder label is longer than 200 bytes') end
if not load_state() then return missing_reply() end

reclaim()
recover()
local in_queue = false
if not fresh then
  local expiry = tonumber(redis.call('ZSCORE', K.leases, id))
  if expiry and expiry > NOW then
    local m = meta_parse(redis.call('HGET', K.holders, id))
    return finish({SCHEMA, 'granted', (m and m.fence or 0), expiry - NOW, S.epoch})
  end
  in_queue = redis.call('ZSCORE', K.queue, id) ~= false
end

if in_queue then
  guard(K.waiters, K.holders, K.leases)  -- read by grant() after this write
  redis.call('ZADD', K.waiters, NOW + queue_ttl, id)
else
  local reason, hint = blocked()
  local waiting = queued()
  if waiting == 0 then
    -- Nobody waits: admitted at once when there is room (FIFO holds trivially).
    local live = in_flight()
    if not reason and live < S.cap then
      local fence = add_lease(id, ttl, holder, live)
      return finish({SCHEMA, 'granted', fence, ttl, S.epoch})
    end
    reason = reason or ('at capacity: ' .. live .. ' in flight of ' .. S.cap)
  else
    reason = reason or 'earlier callers are queued'
  end
  if not wait then
    return finish({SCHEMA, 'denied', reason, hint, S.epoch})
  end
  guard(K.queue, K.holders, K.leases)  -- waiters was read by queued()
  set('ticket', S.ticket + 1)
  redis.call('ZADD', K.queue, S.ticket, id)
  redis.call('ZADD', K.waiters, NOW + queue_ttl, id)
  redis.call('HSET', K.holders, id, meta_format(0, ttl, NOW, holder))
  if waiting == 0 then created(K.queue) created(K.waiters) created(K.holders) end
end

local granted = grant(id)
if granted[id] then
  return finish({SCHEMA, 'granted', granted[id], ttl, S.epoch})
end
local reason, hint = blocked()
if not reason then
  local live = in_flight()
  if live >= S.cap then
    reason = 'at capacity: ' .. live .. ' in flight of ' .. S.cap
  else
    reason = 'behind earlier waiters'
  end
end
return finish({SCHEMA, 'queued', redis.call('ZRANK', K.queue, id), reason, hint, S.epoch})
