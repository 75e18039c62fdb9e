--[[ renew.lua: the holders' heartbeat; renews a batch of leases at once.

A lease that is no longer live is lost, unless the state it was granted in
is gone (Redis restarted or flushed, the epoch changed): then the lease is
adopted into the new state, so the running holders count again.

Uses    lib/admission.lua (after lib/common.lua)
KEYS    the governor's eight keys, see lib/common.lua
ARGV
  ARGV[1] now        int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel    string        where grants to waiters are announced
  ARGV[3] ttl_ms     int ms >= 1   new time to live of every lease
  ARGV[4..] triples  id, epoch the lease was granted in, holder label
Reply
  {1, 'renewed', epoch, status1, fence1, status2, fence2, ...}
    status = 'ok' (fence 0: unchanged) | 'adopted' (fence: the new fence)
           | 'lost' (fence 0)
  {1, 'missing'}     no such governor: run init.lua, then call again
]]

local ttl = arg_int(3, 'ttl_ms', 1)
if (#ARGV - 3) % 3 ~= 0 then fail('BADARG', 'renew takes (id, epoch, holder) triples') end
for i = 4, #ARGV, 3 do
  arg_id(i, 'id')
  if #ARGV[i + 2] > 200 then fail('BADARG', 'holder label is longer than 200 bytes') end
end
if not load_state() then return missing_reply() end

reclaim()
-- Read every lease first; a batch that adopts or drops a lease touches
-- holders and events too, so it checks every key before its first write.
local expiries, writes_more = {}, false
for i = 4, #ARGV, 3 do
  local id = ARGV[i]
  local expiry = tonumber(redis.call('ZSCORE', K.leases, id))
  expiries[i] = expiry
  if not (expiry and expiry > NOW) then writes_more = true end
end
if writes_more then check_types() end

local reply = {SCHEMA, 'renewed', S.epoch}
local live = nil
for i = 4, #ARGV, 3 do
  local id, epoch, holder = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local expiry = expiries[i]
  if expiry and expiry > NOW then
    redis.call('ZADD', K.leases, 'XX', 'GT', NOW + ttl, id)  -- a late renewal never shortens a lease
    reply[#reply + 1] = 'ok'
    reply[#reply + 1] = 0
  elseif epoch ~= S.epoch then
    if live == nil then live = in_flight() end
    local fence = add_lease(id, ttl, holder, live)
    live = live + 1
    log('adopt', 'lease', id, 'fence', fence, 'why', 'holder of a lease from a lost state renewed')
    reply[#reply + 1] = 'adopted'
    reply[#reply + 1] = fence
  else
    if expiry then
      redis.call('ZREM', K.leases, id)
      redis.call('HDEL', K.holders, id)
    end
    reply[#reply + 1] = 'lost'
    reply[#reply + 1] = 0
  end
end
return finish(reply)
