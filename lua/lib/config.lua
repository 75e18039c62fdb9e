--[[ lib/config.lua: a client's config, as init.lua and reset.lua store it.

Uses lib/common.lua and lib/admission.lua. The config arrives as name,
value pairs (governor/config.py GovernorConfig.script_fields); each is
checked for type and range here again (FIELDS of lib/common.lua), so a
tampered client cannot store an absurd value.
]]

want_all()  -- it may read any field of the state

-- Read name/value config pairs from ARGV[first..] (the CONFIG fields of
-- lib/common.lua, checked against FIELDS): the values as numbers (strings
-- for policy), and as the exact strings the client sent.
local function parse_config(first)
  local wanted = {}
  for _, name in ipairs(CONFIG) do wanted[name] = true end
  local cfg, raw = {}, {}
  local i = first
  while i <= #ARGV do
    local name, raw_value = ARGV[i], ARGV[i + 1]
    if not wanted[name] then fail('BADARG', 'unknown config field ' .. tostring(name)) end
    local spec = FIELDS[name]
    local value = raw_value and field_value(spec, raw_value)
    if value == nil then
      if spec[1] == 'str' then
        fail('BADARG', name .. ' must be adaptive or seed, got ' .. tostring(raw_value))
      end
      fail('BADARG', name .. ' must be ' .. (spec[1] == 'int' and 'an integer' or 'a number')
        .. ' in [' .. spec[2] .. ', ' .. spec[3] .. '], got ' .. tostring(raw_value))
    end
    cfg[name], raw[name] = value, raw_value
    i = i + 2
  end
  for _, name in ipairs(CONFIG) do
    if cfg[name] == nil then fail('BADARG', 'config field ' .. name .. ' is missing') end
  end
  return cfg, raw
end

-- The stored config as name, value pairs (the exact strings), for replies.
local function config_pairs()
  local out = {}
  for _, name in ipairs(CONFIG) do
    out[#out + 1] = name
    out[#out + 1] = RAW[name] or STORE[name] or tostring(S[name])
  end
  return out
end

-- Put a fresh policy state (capacity at max, nothing learnt) into S; the
-- config is stored as the client sent it (`raw`), when given.
local function apply_config(cfg, raw)
  for name, value in pairs(cfg) do
    set(name, value)
    if raw and raw[name] then STORE[name] = raw[name] end
  end
  set('paused', 0)
  set('pause_kind', '')
  set('reason', '')
  set('paused_until', 0)
  set('saved_cap', 0)
  set('not_before', 0)
  set('cap', cfg.max)
  set('streak', 0)
  set('ceiling', 0)
  set('cut_fence', S.fence)
  set('probe_at', NOW)
  set('probe_step', 1)
  set('probe_wait', cfg.probe_ms)
  set('climb', 0)
end

