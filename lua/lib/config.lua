--[[ lib/config.lua: a client's config, as init.lua and reset.lua store it.

Uses lib/common.lua and lib/admission.lua. The config arrives as name,
value pairs (governor/config.py GovernorConfig.script_fields); each is
checked for type and range here again, so a tampered client cannot store
an absurd value.
]]

-- Config fields, as sent by governor/core.py (name value pairs): type and
-- range. A function, so only init and reset build the table.
local function config_fields()
  return {
    max = {'int', 1, 1000000},          -- max_capacity
    window_ms = {'int', 1, 86400000},   -- sliding window
    dec_count = {'int', 1, 1000000},    -- seed: rate-limited attempts that halve
    dec_ratio = {'num', 0, 1},          -- seed: rate-limited share that halves
    ratio_min = {'int', 1, 1000000},    -- seed: attempts needed for the share rule
    dec_factor = {'num', 0, 1},         -- seed: multiplicative decrease
    pause_count = {'int', 1, 1000000},  -- rate-limited attempts that pause
    pause_ratio = {'num', 0, 1},        -- adaptive: share that must also be reached to pause
    resume_frac = {'num', 0, 1},        -- resume at max(1, floor(max * resume_frac))
    inc_succ = {'int', 1, 1000000},     -- successes in a row per additive step
    cut_factor = {'num', 0, 1},         -- adaptive: cut to this share of the pushback level
    probe_ms = {'int', 0, 86400000},    -- adaptive: time between probes above the pushback level
    ra_cap_ms = {'int', 0, 86400000},   -- cap on a reported retry-after
    idle_ms = {'int', 1000, 2592000000},-- every key expires after this long idle
    log_len = {'int', 1, 10000000},     -- decision log length (approximate cap)
  }
end

-- Read name/value config pairs from ARGV[first..]: the values as numbers
-- (strings for policy), and as the exact strings the client sent.
local function parse_config(first)
  local fields = config_fields()
  local cfg, raw = {}, {}
  local i = first
  while i <= #ARGV do
    local name, raw_value = ARGV[i], ARGV[i + 1]
    if name == 'policy' then
      if raw_value ~= 'adaptive' and raw_value ~= 'seed' then
        fail('BADARG', 'policy must be adaptive or seed, got ' .. tostring(raw_value))
      end
      cfg.policy = raw_value
    else
      local spec = fields[name]
      if not spec then fail('BADARG', 'unknown config field ' .. tostring(name)) end
      if spec[1] == 'int' then cfg[name] = arg_int(i + 1, name, spec[2]) else cfg[name] = arg_num(i + 1, name, spec[2], spec[3]) end
      if cfg[name] > spec[3] then fail('BADARG', name .. ' must be <= ' .. spec[3]) end
      raw[name] = raw_value
    end
    i = i + 2
  end
  for name in pairs(fields) do
    if cfg[name] == nil then fail('BADARG', 'config field ' .. name .. ' is missing') end
  end
  if not cfg.policy then fail('BADARG', 'config field policy is missing') end
  return cfg, raw
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

