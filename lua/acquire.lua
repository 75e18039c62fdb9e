--[[ acquire.lua: ask for a lease; join the FIFO queue when it must wait.

KEYS    the governor's eight keys, see common.lua
ARGV
  ARGV[1] now           int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel       string        where grants to waiters are announced
  ARGV[3] id            string        lease id chosen by the caller (random)
  ARGV[4] holder        string        label shown to operators, <= 200 bytes
  ARGV[5] ttl_ms        int ms >= 1   time to live of the lease
  ARGV[6] wait          '1' | '0'     '1' join the queue, '0' try only
  ARGV[7] queue_ttl_ms  int ms >= 1   a waiter not refreshed within this is dropped
Reply
  {1, 'granted', fence, expiry_ms, epoch}
  {1, 'queued', position, reason, hint_ms, epoch}   (wait = '1')
  {1, 'denied', reason, hint_ms, epoch}             (wait = '0')
  {1, 'missing'}    no such governor: run init.lua, then call again
  position counts from 0; hint_ms > 0 is when asking again may pay off.
Idempotent per id: a granted id is answered 'granted' again; a queued id
has its place refreshed (a recovery probe too, see recover() in common.lua).
]]

local id = arg_id(3, 'id')
local holder = ARGV[4]
local ttl = arg_int(5, 'ttl_ms', 1)
local wait = ARGV[6] == '1'
local queue_ttl = arg_int(7, 'queue_ttl_ms', 1)
if #holder > 200 then fail('BADARG', 'holder label is longer than 200 bytes') end
if not load_state() then return missing_reply() end

reclaim()
local expiry = tonumber(redis.call('ZSCORE', K.leases, id))
if expiry and expiry > NOW then
  local m = meta_parse(redis.call('HGET', K.holders, id))
  return finish({SCHEMA, 'granted', int(m and m.fence or 0), int(expiry), S.epoch})
end
recover()

if redis.call('ZSCORE', K.queue, id) then
  redis.call('ZADD', K.waiters, int(NOW + queue_ttl), id)
elseif wait then
  set('ticket', S.ticket + 1)
  redis.call('ZADD', K.queue, int(S.ticket), id)
  redis.call('ZADD', K.waiters, int(NOW + queue_ttl), id)
  redis.call('HSET', K.holders, id, meta_format(0, ttl, NOW, holder))
elseif queued() == 0 then
  -- try only: admitted at once when nobody waits and there is room
  local reason, hint = blocked()
  local live = in_flight()
  if not reason and live < S.cap then
    set('fence', S.fence + 1)
    redis.call('ZADD', K.leases, int(NOW + ttl), id)
    redis.call('HSET', K.holders, id, meta_format(S.fence, ttl, NOW, holder))
    return finish({SCHEMA, 'granted', int(S.fence), int(NOW + ttl), S.epoch})
  end
  return finish({SCHEMA, 'denied', reason or ('at capacity: ' .. int(live) .. ' in flight of ' .. int(S.cap)), int(hint), S.epoch})
else
  return finish({SCHEMA, 'denied', 'earlier callers are queued', 0, S.epoch})
end

local granted = grant(id)
if granted[id] then
  return finish({SCHEMA, 'granted', int(granted[id]), int(NOW + ttl), S.epoch})
end
local reason, hint = blocked()
if not reason then
  local live = in_flight()
  if live >= S.cap then
    reason = 'at capacity: ' .. int(live) .. ' in flight of ' .. int(S.cap)
  else
    reason = 'behind earlier waiters'
  end
end
return finish({SCHEMA, 'queued', redis.call('ZRANK', K.queue, id), reason, int(hint), S.epoch})
