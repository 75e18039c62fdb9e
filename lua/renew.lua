--[[ renew.lua: the holders' heartbeat; renews a batch of leases at once.

A lease that is no longer live is lost, unless the state it was granted in
is gone (Redis restarted or flushed, the epoch changed): then the lease is
adopted into the new state, so the running holders count again.

KEYS    the governor's eight keys, see common.lua
ARGV
  ARGV[1] now        int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel    string        where grants to waiters are announced
  ARGV[3] ttl_ms     int ms >= 1   new time to live of every lease
  ARGV[4..] triples  id, epoch the lease was granted in, holder label
Reply
  {1, 'renewed', epoch, status1, fence1, status2, fence2, ...}
    status = 'ok' | 'adopted' (fence is the new fence) | 'lost' (fence 0)
  {1, 'missing'}     no such governor: run init.lua, then call again
]]

local ttl = arg_int(3, 'ttl_ms', 1)
if (#ARGV - 3) % 3 ~= 0 then fail('BADARG', 'renew takes (id, epoch, holder) triples') end
if not load_state() then return missing_reply() end

reclaim()
local reply = {SCHEMA, 'renewed', S.epoch}
for i = 4, #ARGV, 3 do
  local id = arg_id(i, 'id')
  local epoch, holder = ARGV[i + 1], ARGV[i + 2]
  local expiry = tonumber(redis.call('ZSCORE', K.leases, id))
  if expiry and expiry > NOW then
    redis.call('ZADD', K.leases, 'XX', int(NOW + ttl), id)
    local m = meta_parse(redis.call('HGET', K.holders, id))
    reply[#reply + 1] = 'ok'
    reply[#reply + 1] = int(m and m.fence or 0)
  elseif epoch ~= S.epoch and #holder <= 200 then
    set('fence', S.fence + 1)
    redis.call('ZADD', K.leases, int(NOW + ttl), id)
    redis.call('HSET', K.holders, id, meta_format(S.fence, ttl, NOW, holder))
    log('adopt', 'lease', id, 'fence', int(S.fence), 'why', 'holder of a lease from a lost state renewed')
    reply[#reply + 1] = 'adopted'
    reply[#reply + 1] = int(S.fence)
  else
    if expiry then
      redis.call('ZREM', K.leases, id)
      redis.call('HDEL', K.holders, id)
    end
    reply[#reply + 1] = 'lost'
    reply[#reply + 1] = '0'
  end
end
return finish(reply)
