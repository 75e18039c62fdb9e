--[[ lib/admin.lua: what the rarely run scripts share.

Uses lib/common.lua, lib/args.lua, lib/fields.lua, lib/records.lua, lib/budgets.lua, lib/origin.lua,
lib/admission.lua.
Defines: load_all, status_reply.
load_all() reads and checks every field of the three hashes (HGETALL each);
status_reply() is the reply of status, probe and the operator scripts (which
also call check_types() of lib/common.lua before they write).
]]

-- Every field of the state, config and policy hashes, each checked (see
-- check_all); nil when the governor does not exist. A state written by
-- another schema says so first.
local STATUS_LOAD = {'epoch', 'schema'}
local function load_all()
  if not load(STATUS_LOAD) then return nil end
  if STATE.schema ~= SCHEMA then fail('SCHEMA', STATE.schema .. ' (this client speaks ' .. SCHEMA .. ')') end
  check_all()
  return STATE
end

-- Why a new caller would wait now ('' when it would be admitted).
local function why_blocked()
  local unusable = status_why()  -- another server's state, a lost key (lib/origin.lua)
  if unusable ~= '' then return unusable end
  local why = blocked(NO_TOKENS)
  -- (the queue: a waiter parked at its tenant's cap holds up nobody)
  if not why and redis.call('ZCARD', KEY.queue) > 0 then why = 'earlier callers are queued' end
  return why or ''
end

-- Who cannot be admitted now while a new caller of the default place
-- would be ('' when nobody, or when everyone waits: blocked says why):
-- the classes below the highest when the reserve holds them, each capped
-- tenant at its cap, in the admission rule's words, '; '-separated.
-- O(capped tenants): for status only.
local function held_back()
  if blocked(NO_TOKENS) then return '' end
  local out = {}
  local lower = blocked(NO_TOKENS, {rank = 1})
  if lower then out[#out + 1] = lower end
  if CONFIG.tenant_caps ~= '' then
    for tenant in string.gmatch(CONFIG.tenant_caps, '([^,=]+)=%d+') do
      local why = blocked(NO_TOKENS, {rank = 0, tenant = tenant})
      if why then out[#out + 1] = why end
    end
  end
  return table.concat(out, '; ')
end

-- Each active budget: kind, limit, capacity (its burst, else its limit),
-- level now, reserved by the live leases (their holder records: O(leases),
-- for status only), source.
local function budget_section()
  local out = {}
  local kinds = active_budgets()
  if #kinds == 0 then return out end
  local reserved = {}
  for _, kind in ipairs(kinds) do reserved[kind] = 0 end
  local live = redis.call('ZRANGEBYSCORE', KEY.leases, LIVE, '+inf')
  for i = 1, #live, 1000 do
    local records = redis.call('HMGET', KEY.holders, unpack(live, i, math.min(i + 999, #live)))
    for j = 1, #records do
      local holder_record = record_parse(records[j])
      if holder_record then
        for _, kind in ipairs(kinds) do reserved[kind] = reserved[kind] + budget_cost(kind, holder_record.tokens) end
      end
    end
  end
  for _, kind in ipairs(kinds) do
    local level = budget_level(kind)
    out[#out + 1] = kind
    out[#out + 1] = STATE[kind .. '_limit']
    out[#out + 1] = capacity_of(kind)
    out[#out + 1] = string.format('%.3f', level)
    out[#out + 1] = reserved[kind]
    out[#out + 1] = STATE[kind .. '_source']
  end
  return out
end

-- The status reply: each of STATUS_FIELDS (governor.protocol), in its
-- order, with its value.
local function status_reply()
  local rate_limited, total = window()
  local fields_of = {
    now = NOW, epoch = STATE.epoch, policy = CONFIG.policy, capacity = STATE.capacity,
    max_capacity = CONFIG.max_capacity,
    reserve = CONFIG.reserve, paused = STATE.paused, pause_kind = STATE.pause_kind, pause_reason = STATE.pause_reason,
    paused_until = STATE.paused_until, not_before = STATE.not_before, in_flight = in_flight(),
    queued = redis.call('ZCOUNT', KEY.waiters, LIVE, '+inf'), window_rate_limited = rate_limited,
    window_attempts = total,
    window_ms = CONFIG.window_ms, streak = POLICY.streak or 0, fence = STATE.fence, ceiling = POLICY.ceiling or 0,
    background_ppm = POLICY.background_ppm or 0,
    quota_exhausted = STATE.quota_exhausted, quota_at = STATE.quota_at, quota_until = STATE.quota_until or 0,
    created = STATE.created, blocked = why_blocked(),
    hold_until = STATE.hold_until or 0, hold_reason = STATE.hold_reason or '', ttl_max = STATE.ttl_max or 0,
    held_back = held_back(), budgets = budget_section(),
  }
  local reply = {SCHEMA, 'status'}
  for _, name in ipairs(STATUS_FIELDS) do
    if fields_of[name] == nil then fail('BADSTATE', 'status field ' .. name .. ' has no value') end
    reply[#reply + 1] = name
    reply[#reply + 1] = fields_of[name]
  end
  return reply
end
