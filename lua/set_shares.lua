--[[ set_shares.lua: change the tenants' weights and the aging at run time.

The weights and the aging are stored config (GovernorConfig.tenant_weights,
default_weight, aging): clients learn them anew on the config wake and use
them for the callers they queue from then on; waiters already queued keep
their places. What the policy learnt is kept.

Uses    lib/admission.lua, lib/policy.lua, lib/admin.lua (after lib/common.lua)
KEYS    the governor's keys, see lib/common.lua
ARGV
  ARGV[1] now             int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel         string        where grants to waiters are announced
  ARGV[3] tenant_weights  string        "tenant=weight,..." ('' none), weights 1..1000
  ARGV[4] default_weight  int 1..1000   the weight of a tenant not listed
  ARGV[5] aging_ms        int ms >= 0   a lower class's waiter goes ahead after this (0: never)
Reply
  the status reply of status.lua, after the change
  {2, 'missing'}   no such governor: run init.lua, then call again
]]

local weights = ARGV[3]
if weights == nil or #weights > 65536 then fail('BADARG', 'tenant_weights must be at most 64 KiB') end
if weights ~= '' then
  for item in string.gmatch(weights .. ',', '([^,]*),') do
    local tenant, weight = string.match(item, '^([%w%-_.:]+)=(%d+)$')
    if not tenant or #tenant > 64 or tonumber(weight) < 1 or tonumber(weight) > MAX_WEIGHT then
      fail('BADARG', 'tenant_weights must be tenant=weight pairs (weights 1..' .. MAX_WEIGHT .. '), got '
        .. string.format('%q', item))
    end
  end
end
local default_weight = arg_int(4, 'default_weight', 1)
if default_weight > MAX_WEIGHT then fail('BADARG', 'default_weight must be <= ' .. MAX_WEIGHT) end
local aging = arg_int(5, 'aging_ms')
if aging > 86400000 then fail('BADARG', 'aging_ms must be at most a day') end
clock()
check_types()
if not load_all() then return missing_reply() end
keep_alive()

log('set_shares', 'tenant_weights', weights, 'default_weight', default_weight, 'aging_ms', aging,
  'from_weights', C.tenant_weights, 'from_aging_ms', C.aging_ms, 'why', 'operator')
set('config', 'tenant_weights', weights)
set('config', 'default_weight', default_weight)
set('config', 'aging_ms', aging)
if not STORE then STORE = {} end
STORE.tenant_weights = weights  -- a string as sent (save() would keep it anyway)
redis.call('PUBLISH', CHANNEL, S.epoch .. ' !config')  -- clients learn the stored config anew
reclaim(true)
grant()
return finish(status_reply())
