"""The Lua scripts of the Redis state store (``state/redis.py``): one script per
read-modify-write, so a call is atomic across every replica sharing the Redis.

Shared ARGV head: ``ARGV[1]`` the caller's clock in seconds, or ``""`` for Redis's own
``TIME``. Then four ARGV per key, in KEYS order: for a limit its kind (``b`` bucket, ``c``
counter), cost, capacity or limit, period or TTL in seconds; for a lease set ``l``, the
lease id, the most leases held at once and the lease's TTL in seconds (the last two unused
when settling). ``reserve``/``lease`` run ``ADMIT``; ``adjust`` runs ``SETTLE``.

Layout: a bucket is a hash ``{l: level, t: when}`` (absent = full), a counter a hash
``{v: value, e: expires at}`` (absent or past ``e`` = 0), a lease set a sorted set of lease
ids scored by their expiry. Every key also carries a Redis TTL (when it would be full,
reset or empty, plus a second), so Redis drops idle state by itself. Numbers go back to
the client as strings (Lua numbers are doubles; Redis truncates returned numbers).
"""

from __future__ import annotations

_HEAD = """
local function clock()
  if ARGV[1] ~= '' then return tonumber(ARGV[1]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1e6
end
local function num(x) return string.format('%.17g', x) end
local function keep(key, seconds)
  redis.call('PEXPIRE', key, math.max(1, math.ceil(seconds * 1000)) + 1000)
end
local now  -- set by each script before it loads or saves a limit
local function load(i)
  local a = 2 + (i - 1) * 4
  local c = {kind = ARGV[a], cost = tonumber(ARGV[a + 1]), cap = tonumber(ARGV[a + 2]),
             span = tonumber(ARGV[a + 3])}
  if c.kind == 'b' then
    local h = redis.call('HMGET', KEYS[i], 'l', 't')
    c.rate = c.cap / c.span
    c.v = c.cap
    if h[1] then c.v = math.min(c.cap, tonumber(h[1]) + (now - tonumber(h[2])) * c.rate) end
  else
    local h = redis.call('HMGET', KEYS[i], 'v', 'e')
    c.v, c.e = 0, now + c.span
    if h[1] and tonumber(h[2]) > now then c.v, c.e = tonumber(h[1]), tonumber(h[2]) end
  end
  return c
end
local function save(i, c)
  if c.kind == 'b' then
    redis.call('HSET', KEYS[i], 'l', num(c.v), 't', num(now))
    keep(KEYS[i], math.max(c.cap - c.v, 0) / c.rate)
  else
    redis.call('HSET', KEYS[i], 'v', num(c.v), 'e', num(c.e))
    keep(KEYS[i], c.e - now)
  end
end
"""

ADMIT = _HEAD + """
now = clock()
local EPS = 1e-9
local cs, out, refused, retry, never, full = {}, {}, 0, 0, false, 0
for i = 1, #KEYS do
  if ARGV[2 + (i - 1) * 4] == 'l' then
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', num(now))
    local cap = tonumber(ARGV[4 + (i - 1) * 4])
    if full == 0 and redis.call('ZCARD', KEYS[i]) >= cap then full = i end
  else
    local c = load(i)
    cs[i] = c
    local wait = 0
    if c.kind == 'c' then
      if c.v + c.cost > c.cap then
        if c.cost > c.cap then never = true else wait = c.e - now end
        if wait <= 0 and not never then wait = 1e-9 end
      end
    elseif c.v + EPS < c.cost then
      if c.cost > c.cap then never = true else wait = (c.cost - c.v) / c.rate end
    end
    if (wait > 0 or never) and refused == 0 then refused = i end
    if wait > retry then retry = wait end
  end
end
if full > 0 then refused = full end
for i = 1, #KEYS do
  local c = cs[i]
  if c then
    if refused == 0 then
      if c.kind == 'c' then c.v = c.v + c.cost else c.v = c.v - c.cost end
      save(i, c)
    end
    if c.kind == 'c' then
      out[#out + 1] = num(c.cap - c.v); out[#out + 1] = num(math.max(c.e - now, 0))
    else
      out[#out + 1] = num(c.v); out[#out + 1] = num(math.max(c.cap - c.v, 0) / c.rate)
    end
  elseif refused == 0 then
    local a = 2 + (i - 1) * 4
    local ttl = tonumber(ARGV[a + 3])
    redis.call('ZADD', KEYS[i], num(now + ttl), ARGV[a + 1])
    local ms = math.ceil(ttl * 1000) + 1000
    if redis.call('PTTL', KEYS[i]) < ms then redis.call('PEXPIRE', KEYS[i], ms) end
  end
end
local r = ''
if not never then r = num(retry) end
return {refused, r, unpack(out)}
"""
"""KEYS: the limits' keys, then the lease sets' (charges first). Takes every charge and
every lease, or nothing. Returns ``{denied index (0: allowed, else the 1-based KEYS index
of the first full lease set, else of the first charge that did not fit), retry seconds
or "" for never, then remaining and reset seconds per charge}``."""

SETTLE = _HEAD + """
for i = 1, #KEYS do
  local a = 2 + (i - 1) * 4
  if ARGV[a] == 'l' then
    redis.call('ZREM', KEYS[i], ARGV[a + 1])
  else
    now = now or clock()  -- a release alone needs no time
    local c = load(i)
    if c.kind == 'c' then c.v = math.max(0, c.v + c.cost)
    else c.v = math.min(c.cap, c.v - c.cost) end
    save(i, c)
  end
end
return 1
"""
"""KEYS: the limits' keys, then lease sets'; moves each limit by its cost without a check
and ends each lease."""
