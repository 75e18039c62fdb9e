--[[ lib/config.lua: a client's config, as init.lua and reset.lua store it.

Uses lib/common.lua, lib/fields.lua, lib/budgets.lua, lib/shares.lua, lib/policy.lua.
Defines: parse_config, config_pairs, apply_config, clear_learnt.
The config arrives as name, value pairs (governor/config.py
GovernorConfig.script_fields): the base fields of the config hash, then the
fields of its policy (POLICIES[policy].config). Each is checked for kind and
range here again (FIELDS), so a tampered client cannot store an absurd
value; a missing, unknown or other policy's field is refused.
]]

-- Read name/value config pairs from ARGV[first..]: the values as numbers
-- (strings for policy), and the exact strings the client sent. Returns
-- cfg, raw and the ordered names.
local function parse_config(first)
  local pairs_at = {}
  for i = first, #ARGV, 2 do pairs_at[ARGV[i]] = i end
  local policy_name = pairs_at.policy and ARGV[pairs_at.policy + 1]
  local policy = POLICIES[policy_name or '']
  if not policy then
    local names = {}
    for name in pairs(POLICIES) do names[#names + 1] = name end
    table.sort(names)
    fail('BADARG', 'policy must be one of ' .. table.concat(names, ', ') .. ', got ' .. tostring(policy_name))
  end
  local order = {}
  for _, name in ipairs(BASE_CONFIG) do order[#order + 1] = name end
  for _, name in ipairs(policy.config) do order[#order + 1] = name end
  local cfg, raw, wanted = {}, {}, {}
  for _, name in ipairs(order) do wanted[name] = true end
  for i = first, #ARGV, 2 do
    local name = ARGV[i]
    if not wanted[name] then fail('BADARG', 'unknown config field ' .. tostring(name) .. ' for policy ' .. policy_name) end
    if ARGV[i + 1] == nil then fail('BADARG', 'config field ' .. name .. ' has no value') end
  end
  for _, name in ipairs(order) do
    local at = pairs_at[name]
    if not at then fail('BADARG', 'config field ' .. name .. ' is missing') end
    local raw_value = ARGV[at + 1]
    local kind = FIELDS[name]
    local value = raw_value
    if kind[1] ~= 'str' then
      value = tonumber(raw_value)
      if value == nil or value ~= value or value < kind[2] or value > kind[3] or (kind[1] == 'int' and value % 1 ~= 0) then
        fail('BADARG', name .. ' must be ' .. (kind[1] == 'int' and 'an integer' or 'a number')
          .. ' in [' .. kind[2] .. ', ' .. kind[3] .. '], got ' .. tostring(raw_value))
      end
    end
    cfg[name], raw[name] = value, raw_value
  end
  return cfg, raw, order
end

-- The stored config as name, value pairs (the exact stored strings), for
-- init's reply: the config hash as it is.
local function config_pairs()
  local flat = redis.call('HGETALL', KEY.config)
  local out = {}
  for i = 1, #flat, 2 do
    if FIELDS[flat[i]] then
      out[#out + 1] = flat[i]
      out[#out + 1] = flat[i + 1]
    end
  end
  return out
end

-- Store a config (replacing the config hash: another policy's fields go)
-- and a fresh learnt state: capacity at max (the adaptive policy's reset
-- lowers it to the resume level: its slow start), no pause, no Retry-After
-- hold (a recovery hold stays: STATE.hold_until, read with every field), the
-- policy's state reset, each budget at its configured ceiling (full) or
-- not governed until a header announces it. Needs STATE.fence and NOW; every
-- key's type checked.
local function apply_config(cfg, raw)
  redis.call('DEL', KEY.config, KEY.policy)
  created(KEY.config)
  created(KEY.policy)
  CONFIG, POLICY = {}, {}
  if DIRTY then DIRTY.config, DIRTY.policy = nil, nil end
  if not STORE then STORE = {} end
  for name, value in pairs(cfg) do
    set('config', name, value)
    STORE[name] = raw[name]
  end
  set('state', 'paused', 0)
  set('state', 'pause_kind', '')
  set('state', 'pause_reason', '')
  set('state', 'paused_until', 0)
  set('state', 'saved_capacity', 0)
  -- a recovery hold stays (lib/origin.lua): only resume's lift-hold ends it
  local hold_until = STATE.hold_until or 0
  set('state', 'not_before', hold_until > NOW and hold_until or 0)
  set('state', 'capacity', cfg.max_capacity)
  local on = {}
  for _, kind in ipairs(BUDGET_KINDS) do
    local ceiling = cfg[kind .. '_per_minute']
    local f_limit, f_burst, f_level, f_at, f_source = budget_fields(kind)
    set('state', f_limit, ceiling)
    set('state', f_burst, 0)
    set('state', f_level, ceiling)
    set('state', f_at, NOW)
    set('state', f_source, ceiling > 0 and 'configured' or '')
    if ceiling > 0 then
      on[#on + 1] = kind
      if BUDGET_COST[kind][4] ~= '' then CALL.tiers = true end  -- a tier's budget active (raise_layout)
    end
  end
  set('state', 'budgets', table.concat(on, ','))
  CALL.active = false
  set('policy', 'streak', 0)
  POLICIES[cfg.policy].reset()
  recount(true)  -- the caps and the reserve as stored now; parked waiters queue again
end

-- Forget what the policy learnt, keeping the stored config (reset without
-- a config): the same fresh state apply_config makes.
local function clear_learnt()
  local cfg, raw = {}, {}
  local flat = redis.call('HGETALL', KEY.config)
  for i = 1, #flat, 2 do
    if FIELDS[flat[i]] then cfg[flat[i]], raw[flat[i]] = value_of(flat[i], flat[i + 1]), flat[i + 1] end
  end
  local policy = POLICIES[cfg.policy or '']
  if not policy then fail('BADSTATE', 'field policy holds ' .. string.format('%q', tostring(cfg.policy))) end
  for _, list in ipairs({BASE_CONFIG, policy.config}) do
    for _, name in ipairs(list) do
      -- (one a later version added reads as its default: value_of)
      if cfg[name] == nil then cfg[name], raw[name] = value_of(name, nil), ABSENT[name] end
    end
  end
  apply_config(cfg, raw)
end
