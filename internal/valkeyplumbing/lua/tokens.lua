-- tokens: exact arithmetic on fencing tokens, for the scripts of this
-- module that compare or advance them (valkeyplumbing.TokenScript puts it at
-- the top of a script, after a line that sets tokens.LEAD).
--
-- A Lua number is a double, exact only up to 2^53, and a token may be any
-- uint64: read with tonumber, 2^53 + 1 becomes 2^53, and adding one to
-- 2^63 - 1 gives a number string.format('%d') writes as -2^63. So a token
-- is never a Lua number here: it is a canonical decimal string (digits,
-- no leading zero, '0' for none) and is compared and added digit by digit.
-- The numbers the functions compute are single digits and carries.
--
-- tokens.LEAD is fence.MaxTokenLead in microseconds, as a decimal string.

-- tokens.valid(s) reports whether s is a canonical decimal token: 1 to 20
-- digits, the first not 0. (Twenty digits reach past 2^64 - 1; every
-- script compares a token with tokens.largest before it keeps it, which
-- is far below.)
function tokens.valid(s)
  return type(s) == 'string' and #s <= 20 and string.match(s, '^[1-9]%d*$') ~= nil
end

-- tokens.less(a, b) reports a < b for canonical decimals: the shorter is
-- less, and of two as long the first differing digit decides, byte by
-- byte (Lua's string < follows the server's locale).
function tokens.less(a, b)
  if #a ~= #b then return #a < #b end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return false
end

-- tokens.max(a, b) returns the greater of two canonical decimals.
function tokens.max(a, b)
  if tokens.less(a, b) then return b end
  return a
end

-- tokens.add(a, b) returns a + b for canonical decimals, as a canonical
-- decimal of any length.
function tokens.add(a, b)
  local out, carry = {}, 0
  local i, j = #a, #b
  while i > 0 or j > 0 or carry > 0 do
    local d = carry
    if i > 0 then d, i = d + string.byte(a, i) - 48, i - 1 end
    if j > 0 then d, j = d + string.byte(b, j) - 48, j - 1 end
    carry = d >= 10 and 1 or 0
    out[#out + 1] = string.char(48 + d % 10)
  end
  -- Least significant digit first: reverse.
  local n = #out
  for k = 1, math.floor(n / 2) do
    out[k], out[n + 1 - k] = out[n + 1 - k], out[k]
  end
  local s = table.concat(out)
  if s == '' then return '0' end
  return s
end

-- tokens.clock(t) returns the time of a TIME reply t in microseconds, as
-- a canonical decimal: the seconds followed by the microseconds in six
-- digits.
function tokens.clock(t)
  return t[1] .. string.format('%06d', tonumber(t[2]))
end

-- tokens.largest(t) returns the largest plausible token at the time of
-- the TIME reply t: the clock in microseconds plus tokens.LEAD. A token
-- above it is more than fence.MaxTokenLead ahead of the server's clock,
-- higher than any backend can have issued yet (see fence.MaxTokenLead).
function tokens.largest(t)
  return tokens.add(tokens.clock(t), tokens.LEAD)
end
