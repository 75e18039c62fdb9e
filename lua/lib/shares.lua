--[[ lib/shares.lua: tenant caps, the reserve and parking.

Uses lib/common.lua, lib/fields.lua, lib/records.lua.
Defines: CAPS_CONFIG, caps_config, cap_of, held_of, held_change, held_add,
requeue, replace, unpark, held_remove, recount.

Caps and the reserve (governor.protocol.PARK_SLOT): a tenant with a cap
holds at most that many leases; the classes below the highest hold at most
capacity - reserve (an aged waiter may take the reserve). A waiter at the
head whose tenant is at its cap is parked (grant() of lib/queue.lua asks
the next), and each of the tenant's leases that ends puts its first parked
waiter back at the front of its class (unpark), so a capped tenant never
holds up the others. The held hash counts each capped tenant's leases and
the lower classes' (LOWER_HELD): held_of reads a count, held_add and
held_remove count a lease in and out; this call's reads of it are kept in
CALL.held.
]]

-- What the caps and the reserve need of the config (and finish() of a
-- call that may create held), for the paths that admit without prepare().
local CAPS_CONFIG = {'tenant_caps', 'reserve', 'idle_ms'}

-- The caps and the reserve (for prepare(), and for acquire's admission
-- without it): read from the config while state capped says some are set
-- (recount() keeps it), else none, without reading them. Needs STATE.capped.
local function caps_config()
  if STATE.capped == 1 then
    read_more('config', unpack(CAPS_CONFIG))
  else
    local into = fields_of('config')
    into.tenant_caps, into.reserve = '', 0
  end
end

-- The cap of `tenant` and its slot (its place in config tenant_caps, from
-- 1), or nil: one plain search of the stored "tenant=cap,..." per tenant
-- and call. Needs CONFIG.tenant_caps.
local function cap_of(tenant)
  if CONFIG.tenant_caps == '' then return nil end
  local caps = CALL.caps
  if not caps then
    caps = {}
    CALL.caps = caps
  end
  local found = caps[tenant]
  if found == nil then
    local list = ',' .. CONFIG.tenant_caps .. ','
    local at = string.find(list, ',' .. tenant .. '=', 1, true)
    local cap = at and tonumber(string.match(list, '^(%d+),', at + #tenant + 2))
    found = false
    if cap then found = {cap, select(2, string.gsub(string.sub(list, 1, at), ',', ''))} end
    caps[tenant] = found
  end
  if not found then return nil end
  return found[1], found[2]
end

-- The leases in flight counted under `field` of held (a capped tenant, or
-- LOWER_HELD: the classes below the highest while a reserve is set), as
-- this call read and changed them; held_change() moves one and writes it (a
-- field goes at 0).
-- A call that reads held after its first write has guarded it (KEY.held).
-- A count the hash lacks while held's sentinel is gone too (held lost:
-- keys_lost() of lib/origin.lua counts it again at the next reclaim) is
-- counted from the records of the leases in leases, as recount() would.
local function counted_from_leases(field)
  local n = 0
  local ids = redis.call('ZRANGEBYSCORE', KEY.leases, '(0', '+inf')
  for i = 1, #ids, 1000 do
    local chunk = {unpack(ids, i, math.min(i + 999, #ids))}
    local records = redis.call('HMGET', KEY.holders, unpack(chunk))
    for j = 1, #chunk do
      local r = record_parse(records[j])
      if r and (r.tenant == field or (field == LOWER_HELD and r.rank > 0)) then n = n + 1 end
    end
  end
  return n
end

local function held_of(field)
  local counts = CALL.held
  if not counts then
    counts = {}
    CALL.held = counts
  end
  if counts[field] == nil then
    local n = tonumber(redis.call('HGET', KEY.held, field))
    if not n and STATE and STATE.capped == 1 and redis.call('HEXISTS', KEY.held, SENTINEL) == 0 then
      n = counted_from_leases(field)
    end
    counts[field] = n or 0
  end
  return counts[field]
end

local function held_change(field, delta)
  local n = held_of(field) + delta
  CALL.held[field] = n
  if n > 0 then
    redis.call('HSET', KEY.held, field, n)
    if n == delta then created(KEY.held) end
  else
    redis.call('HDEL', KEY.held, field)
  end
end

-- A new lease of `place` counts in its tenant's cap and, below the highest
-- class, in the lower classes' leases while a reserve is set. Needs CAPS_CONFIG.
local function held_add(place)
  if cap_of(place.tenant) then held_change(place.tenant, 1) end
  if place.rank > 0 and CONFIG.reserve > 0 then held_change(LOWER_HELD, 1) end
end

-- A waiter parked at its tenant's cap goes back to the queue, at the front
-- of its class (its class's vtime: every tag queued there is at least
-- that), in band 0 if it aged meanwhile (age() found it parked). Needs
-- prepare(); the caller has guarded queue, aging, parked.
local function requeue(id)
  local holder_record = record_parse(redis.call('HGET', KEY.holders, id))
  local rank = holder_record and holder_record.rank or 0
  local band = rank + 1
  if rank > 0 and CONFIG.aging_ms > 0 and not redis.call('ZSCORE', KEY.aging, id) then band = 0 end
  redis.call('ZADD', KEY.queue, band * QUEUE_BAND + STATE[VTIMES[rank + 1]], id)
end

-- A live waiter whose place was lost (its queue or parked entry evicted or
-- deleted: refresh.lua finds it) takes its turn again before the waiters
-- who came after it: parked at the front of its tenant's slot while the
-- tenant is at its cap, else back in the queue (requeue). Needs prepare();
-- the caller has guarded queue, aging, parked.
local function replace(id)
  local holder_record = record_parse(redis.call('HGET', KEY.holders, id))
  local tenant = holder_record and holder_record.tenant or ''
  local cap, slot = cap_of(tenant)
  if not (cap and held_of(tenant) >= cap) then return requeue(id) end
  local low = slot * PARK_SLOT
  local first = redis.call('ZRANGEBYSCORE', KEY.parked, low, low + PARK_SLOT - 1, 'WITHSCORES', 'LIMIT', 0, 1)[2]
  redis.call('ZADD', KEY.parked, math.max(low, (tonumber(first) or low + 1) - 1), id)
  created(KEY.parked)
end

-- Tenant `tenant` has room under its cap again: its first parked waiter
-- that still waits goes back to the queue (dead ones go; at most BATCH).
-- Needs prepare().
local function unpark(tenant)
  local cap, slot = cap_of(tenant)
  if not cap or held_of(tenant) >= cap then return end
  for _ = 1, BATCH do
    local id = redis.call('ZRANGEBYSCORE', KEY.parked, slot * PARK_SLOT, (slot + 1) * PARK_SLOT - 1, 'LIMIT', 0, 1)[1]
    if not id then return end
    redis.call('ZREM', KEY.parked, id)
    local deadline = tonumber(redis.call('ZSCORE', KEY.waiters, id))
    if deadline and deadline > NOW then
      requeue(id)
      return
    end
    redis.call('ZREM', KEY.waiters, id)
    redis.call('ZREM', KEY.aging, id)
    redis.call('HDEL', KEY.holders, id)
  end
end

-- A lease (its record m) ended, counted once: by whoever removed it from
-- leases. Its tenant's count and the lower classes' go down; with `waiting`,
-- the tenant's first parked waiter goes back to the queue (unpark: needs
-- prepare()). The caller has read held's type (EXISTS) or guarded it.
local function held_remove(holder_record, waiting)
  if not holder_record then return end
  if held_of(holder_record.tenant) > 0 then
    held_change(holder_record.tenant, -1)
    if waiting then unpark(holder_record.tenant) end
  end
  if holder_record.rank > 0 and held_of(LOWER_HELD) > 0 then held_change(LOWER_HELD, -1) end
end

-- The caps or the reserve changed (set_shares, a config stored afresh):
-- held counted again from the records of the leases in leases (expired
-- ones not yet reclaimed included: reclaim() takes each off when it
-- removes it, so each lease counts exactly once, in one call); each parked waiter
-- whose tenant still has a cap moves to its new slot, keeping its order,
-- the others go back to the queue (all of them when `fresh`: a new state,
-- whose tags start again), and each capped tenant's room is filled from
-- its parked waiters. O(leases + parked): for the operator scripts only.
-- Needs prepare() (or a config stored); every key's type checked.
local function recount(fresh)
  redis.call('DEL', KEY.held)
  CALL.held, CALL.caps = {}, false
  local shaped = CONFIG.tenant_caps ~= '' or CONFIG.reserve > 0
  set('state', 'capped', shaped and 1 or 0)
  if shaped then
    redis.call('HSET', KEY.held, SENTINEL, '')  -- its loss is told (keys_lost() of lib/origin.lua)
    created(KEY.held)
    local ids = redis.call('ZRANGEBYSCORE', KEY.leases, '(0', '+inf')  -- every lease but the sentinel
    for i = 1, #ids, 1000 do
      local chunk = {unpack(ids, i, math.min(i + 999, #ids))}
      local records = redis.call('HMGET', KEY.holders, unpack(chunk))
      for j = 1, #chunk do
        local holder_record = record_parse(records[j])
        if holder_record then held_add(holder_record) end
      end
    end
  end
  local parked = redis.call('ZRANGE', KEY.parked, 0, -1, 'WITHSCORES')
  local tenants = {}
  for i = 1, #parked, 2 do
    local id = parked[i]
    local holder_record = record_parse(redis.call('HGET', KEY.holders, id))
    local cap, slot = nil, nil
    if holder_record and not fresh then cap, slot = cap_of(holder_record.tenant) end
    if cap then
      redis.call('ZADD', KEY.parked, slot * PARK_SLOT + tonumber(parked[i + 1]) % PARK_SLOT, id)
      tenants[holder_record.tenant] = cap
    else
      redis.call('ZREM', KEY.parked, id)
      requeue(id)
    end
  end
  for tenant, cap in pairs(tenants) do
    for _ = 1, cap - held_of(tenant) do unpark(tenant) end
  end
end
