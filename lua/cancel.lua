--[[ cancel.lua: a caller gives up waiting, at whatever point it is.

Removes the id from the queue, or, when it was granted in the meantime,
releases the lease so the slot goes to the next waiter. Never swallows a
slot, never leaks one; idempotent.

Uses    lib/common.lua, lib/args.lua, lib/call.lua, lib/fields.lua, lib/records.lua, lib/shares.lua,
        lib/origin.lua, lib/plans.lua, lib/upkeep.lua, lib/queue.lua
KEYS    the governor's keys, see lib/common.lua
ARGV
  ARGV[1] now      int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel  string        where grants to waiters are announced
  ARGV[3] id       string        the waiter's (and would-be lease's) id
Reply
  {SCHEMA, 'cancelled', was}   was = 'queued' | 'granted' | 'none'
  {SCHEMA, 'missing'}          no such governor: nothing to cancel
]]

local id = arg_id(3, 'id')
-- step: the state
clock()
if not load(WRITE) then return missing_reply() end
prepare()
keep_alive()
-- touched after the first write (and what grant() adds)
guard_grant(false, KEY.waiters, KEY.holders, KEY.leases, KEY.parked, KEY.held)
-- step: the writes
local was = 'none'
if redis.call('ZREM', KEY.queue, id) + redis.call('ZREM', KEY.parked, id) > 0 then
  was = 'queued'
  redis.call('ZREM', KEY.waiters, id)
  if STATE.aging_due > 0 then redis.call('ZREM', KEY.aging, id) end
  redis.call('HDEL', KEY.holders, id)
elseif redis.call('ZREM', KEY.leases, id) == 1 then
  was = 'granted'
  local holder_record = record_parse(redis.call('HGET', KEY.holders, id))
  redis.call('HDEL', KEY.holders, id)
  if redis.call('EXISTS', KEY.held) == 1 then held_remove(holder_record, true) end
end
reclaim()
grant()
return finish({SCHEMA, 'cancelled', was})
