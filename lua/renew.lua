--[[ renew.lua: the holders' heartbeat; renews a batch of leases at once.

A lease that is no longer live is lost, unless the state it was granted in
is gone (Redis restarted or flushed, the epoch changed): then the lease is
adopted into the new state, so the running holders count again, each with
the place and reservation it was granted with (its renewal carries them):
its tenant's cap, the reserve and the budgets count it as before the loss.

Uses    lib/common.lua, lib/numbers.lua, lib/args.lua, lib/call.lua, lib/fields.lua,
        lib/decisions.lua, lib/records.lua, lib/shares.lua, lib/origin.lua, lib/plans.lua,
        lib/upkeep.lua, lib/admission.lua
KEYS    the governor's keys, see lib/common.lua
ARGV
  ARGV[1] now        int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel    string        where grants to waiters are announced
  ARGV[3] ttl_ms     LEASE_TTL ms  new time to live of every lease
  ARGV[4..] sevens   id, epoch the lease was granted in, holder label,
                     class rank, tenant, weight (as acquire.lua's ARGV[9..11]),
                     tokens reserved ("input,output[,tier]" or '', as acquire.lua's ARGV[8])
Reply
  {SCHEMA, 'renewed', epoch, status1, fence1, status2, fence2, ...}
    status = 'ok' (fence 0: unchanged) | 'adopted' (fence: the new fence)
           | 'lost' (fence 0)
  {SCHEMA, 'missing'}     no such governor: run init.lua, then call again
]]

local ttl = arg_in(3, 'ttl_ms')
local WIDTH = 7
if (#ARGV - 3) % WIDTH ~= 0 then
  fail('BADARG', 'renew takes (id, epoch, holder, rank, tenant, weight, tokens) sevens')
end
local places, reserved = {}, {}
for i = 4, #ARGV, WIDTH do
  arg_id(i, 'id')
  arg_label(i + 2)
  places[i] = arg_place(i + 3)
  reserved[i] = arg_tokens(i + 6, 'tokens')
end
-- step: the state
clock()
if not load(WRITE, true) then return missing_reply() end
keep_alive()

-- Read every lease first; a batch that adopts or drops a lease touches
-- holders and events too, so it checks every key before its first write.
local expiries, writes_more = {}, false
for i = 4, #ARGV, WIDTH do
  local expiry = tonumber(redis.call('ZSCORE', KEY.leases, ARGV[i]))
  expiries[i] = expiry
  if not (expiry and expiry > NOW) then writes_more = true end
end
if writes_more or NOW >= STATE.reclaim_due then
  prepare()
  check_types()
end

-- step: the writes
reclaim()
note_ttl(ttl)  -- its holders are alive: their TTL counts (ttl_max)
local reply = {SCHEMA, 'renewed', STATE.epoch}
for i = 4, #ARGV, WIDTH do
  local id, epoch, holder = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local expiry = expiries[i]
  if expiry and expiry > NOW then
    redis.call('ZADD', KEY.leases, 'XX', 'GT', int(NOW + ttl), id)  -- a late renewal never shortens a lease
    reply[#reply + 1] = 'ok'
    reply[#reply + 1] = 0
  elseif epoch ~= STATE.epoch then
    if not CALL.live then CALL.live = in_flight() end
    local fence = add_lease(id, ttl, holder, reserved[i], places[i], true)  -- counted in its cap, the reserve, the budgets
    log('adopt', 'lease', id, 'fence', fence, 'tenant', places[i].tenant, 'rank', places[i].rank,
      'why', 'holder of a lease from a lost state renewed')
    reply[#reply + 1] = 'adopted'
    reply[#reply + 1] = fence
  else
    if expiry then
      local holder_record = record_parse(redis.call('HGET', KEY.holders, id))
      redis.call('ZREM', KEY.leases, id)
      redis.call('HDEL', KEY.holders, id)
      held_remove(holder_record, true)
    end
    reply[#reply + 1] = 'lost'
    reply[#reply + 1] = 0
  end
end
return finish(reply)
