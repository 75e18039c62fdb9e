--[[ set_shares.lua: change the tenants' weights and caps, the reserve and
the aging at run time.

They are stored config (GovernorConfig.tenant_weights, default_weight,
tenant_caps, reserve, aging): clients learn them anew on the config wake
and use the weights for the callers they queue from then on; waiters
already queued keep their places. The caps and the reserve apply at once:
the leases in flight are counted again, parked waiters move to their
tenant's new place (or back to the queue: no cap now), O(leases + parked).
What the policy learnt is kept.

Uses    lib/common.lua, lib/args.lua, lib/call.lua, lib/fields.lua, lib/decisions.lua,
        lib/shares.lua, lib/upkeep.lua, lib/queue.lua, lib/admin.lua
KEYS    the governor's keys, see lib/common.lua
ARGV
  ARGV[1] now             int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel         string        where grants to waiters are announced
  ARGV[3] tenant_weights  string        "tenant=weight,..." ('' none), weights 1..1000
  ARGV[4] default_weight  int 1..1000   the weight of a tenant not listed
  ARGV[5] aging_ms        int ms >= 0   a lower class's waiter goes ahead after this (0: never)
  ARGV[6] tenant_caps     string        "tenant=cap,..." ('' none), caps 1..MAX_CAP, at most MAX_CAPPED
  ARGV[7] reserve         int >= 0      slots only the highest class takes, below max_capacity
Reply
  the status reply of status.lua, after the change
  {SCHEMA, 'missing'}   no such governor: run init.lua, then call again
]]

-- ARGV[i]: "tenant=n,..." pairs, each n in [1, high], at most `most` of them.
local function arg_pairs(i, what, high, most)
  local v = ARGV[i]
  if v == nil or #v > 65536 then fail('BADARG', what .. ' must be at most 64 KiB') end
  if v == '' then return v end
  local n = 0
  for item in string.gmatch(v .. ',', '([^,]*),') do
    local tenant, number = string.match(item, '^([%w%-_.:]+)=(%d+)$')
    if not tenant or #tenant > 64 or tonumber(number) < 1 or tonumber(number) > high then
      fail('BADARG', what .. ' must be tenant=n pairs (n in 1..' .. high .. '), got ' .. string.format('%q', item))
    end
    n = n + 1
  end
  if n > most then fail('BADARG', what .. ' names ' .. n .. ' tenants, at most ' .. most) end
  return v
end

local weights = arg_pairs(3, 'tenant_weights', MAX_WEIGHT, math.huge)
local default_weight = arg_int(4, 'default_weight', 1)
if default_weight > MAX_WEIGHT then fail('BADARG', 'default_weight must be <= ' .. MAX_WEIGHT) end
local aging = arg_int(5, 'aging_ms')
if aging > 86400000 then fail('BADARG', 'aging_ms must be at most a day') end
local caps = arg_pairs(6, 'tenant_caps', MAX_CAP, MAX_CAPPED)
local reserve = arg_int(7, 'reserve')
-- step: the state
clock()
check_types()
if not load_all() then return missing_reply() end
if reserve >= CONFIG.max_capacity then
  fail('BADARG', 'reserve must be below max_capacity (' .. CONFIG.max_capacity .. '), got ' .. reserve)
end
keep_alive()

-- step: the writes
log('set_shares', 'tenant_weights', weights, 'default_weight', default_weight, 'aging_ms', aging,
  'tenant_caps', caps, 'reserve', reserve, 'from_weights', CONFIG.tenant_weights, 'from_aging_ms', CONFIG.aging_ms,
  'from_caps', CONFIG.tenant_caps, 'from_reserve', CONFIG.reserve, 'why', 'operator')
local recounts = caps ~= CONFIG.tenant_caps or reserve ~= CONFIG.reserve
reclaim(true)  -- by the caps before the change: parked waiters are in their old slots
set('config', 'tenant_weights', weights)
set('config', 'default_weight', default_weight)
set('config', 'aging_ms', aging)
set('config', 'tenant_caps', caps)
set('config', 'reserve', reserve)
if not STORE then STORE = {} end
STORE.tenant_weights = weights  -- strings as sent (save() would keep them anyway)
STORE.tenant_caps = caps
redis.call('PUBLISH', CHANNEL, STATE.epoch .. ' !config')  -- clients learn the stored config anew
if recounts then recount(false) end
grant()
return finish(status_reply())
