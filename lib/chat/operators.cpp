// Python's arithmetic operators on Values, with markupsafe's rules for Markup operands (a plain
// string added to or formatted into a Markup string is HTML-escaped first).
#include "chat/builtins.hpp"
#include "chat/interpreter.hpp"
#include "chat/objects.hpp"

#include <cmath>
#include <limits>

namespace sitsrt::chat {
namespace {

const char* symbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "+";
    case BinaryOp::kSub: return "-";
    case BinaryOp::kMul: return "*";
    case BinaryOp::kDiv: return "/";
    case BinaryOp::kFloorDiv: return "//";
    case BinaryOp::kMod: return "%";
    case BinaryOp::kPow: return "**";
  }
  return "?";
}

[[noreturn]] void unsupported_operands(BinaryOp op, const Value& a, const Value& b) {
  if (op == BinaryOp::kAdd && a.is_string() && !a.is_markup()) {
    fault(Fault::kType, "can only concatenate str (not \"{}\") to str", type_name(b));
  }
  if (op == BinaryOp::kAdd && (a.is_list() || a.is_tuple())) {
    fault(Fault::kType, "can only concatenate {} (not \"{}\") to {}", type_name(a), type_name(b), type_name(a));
  }
  fault(Fault::kType, "unsupported operand type(s) for {}: '{}' and '{}'", symbol(op), type_name(a), type_name(b));
}

[[noreturn]] void overflow() { fault(Fault::kUnsupported, "integer overflow (Python integers are unbounded)"); }

// Python integers never overflow; ours are 64-bit, so an overflow is reported, not wrapped.
std::int64_t add(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}
std::int64_t subtract(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}
std::int64_t multiply(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

Value repeat(Interpreter& interpreter, const Value& sequence, std::int64_t times) {
  if (times <= 0) {
    return sequence.is_string() ? Value::string("", sequence.is_markup())
                                : Value::sequence({}, sequence.is_tuple() ? SeqKind::kTuple : SeqKind::kList);
  }
  if (sequence.is_string()) {
    const std::string& text = sequence.as_string();
    if (!text.empty() && static_cast<std::uint64_t>(times) > interpreter.limits().max_output_bytes / text.size()) {
      fault(Fault::kLimit, "a string exceeds {} bytes", interpreter.limits().max_output_bytes);
    }
    std::string out;
    out.reserve(text.size() * static_cast<std::size_t>(times));
    for (std::int64_t i = 0; i < times; ++i) out += text;
    return interpreter.make_string(std::move(out), sequence.is_markup());
  }
  const auto& items = sequence.list().items;
  if (!items.empty() && static_cast<std::uint64_t>(times) * items.size() > interpreter.limits().max_output_bytes) {
    fault(Fault::kLimit, "a list exceeds {} items", interpreter.limits().max_output_bytes);
  }
  std::vector<Value> out;
  for (std::int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
  interpreter.charge_string(out.size() * sizeof(Value));
  return Value::sequence(std::move(out), sequence.is_tuple() ? SeqKind::kTuple : SeqKind::kList);
}

double python_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0.0 && ((b < 0) != (m < 0))) m += b;
  if (m == 0.0) m = std::copysign(0.0, b);
  return m;
}

}  // namespace

Value binary_op(Interpreter& interpreter, BinaryOp op, const Value& a, const Value& b) {
  if (a.is_undefined()) a.raise_undefined();
  if (b.is_undefined()) b.raise_undefined();
  const bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
  const bool numbers = a.is_number() && b.is_number();
  switch (op) {
    case BinaryOp::kAdd:
      if (ints) return Value::integer(add(a.int_value(), b.int_value()));
      if (numbers) return Value::number(a.float_value() + b.float_value());
      if (a.is_string() && b.is_string()) {
        if (a.is_markup()) return interpreter.make_string(a.as_string() + (b.is_markup() ? b.as_string() : html_escape(b.as_string())), true);
        if (b.is_markup()) return interpreter.make_string(html_escape(a.as_string()) + b.as_string(), true);
        return interpreter.make_string(a.as_string() + b.as_string());
      }
      if ((a.is_list() && b.is_list()) || (a.is_tuple() && b.is_tuple())) {
        std::vector<Value> items = a.list().items;
        items.insert(items.end(), b.list().items.begin(), b.list().items.end());
        interpreter.charge_string(items.size() * sizeof(Value));
        return Value::sequence(std::move(items), a.is_tuple() ? SeqKind::kTuple : SeqKind::kList);
      }
      break;
    case BinaryOp::kSub:
      if (ints) return Value::integer(subtract(a.int_value(), b.int_value()));
      if (numbers) return Value::number(a.float_value() - b.float_value());
      break;
    case BinaryOp::kMul:
      if (ints) return Value::integer(multiply(a.int_value(), b.int_value()));
      if (numbers) return Value::number(a.float_value() * b.float_value());
      if ((a.is_string() || a.is_list() || a.is_tuple()) && (b.is_int() || b.is_bool())) return repeat(interpreter, a, b.int_value());
      if ((b.is_string() || b.is_list() || b.is_tuple()) && (a.is_int() || a.is_bool())) return repeat(interpreter, b, a.int_value());
      break;
    case BinaryOp::kDiv:
      if (numbers) {
        if (b.float_value() == 0.0) fault(Fault::kType, "division by zero");
        return Value::number(a.float_value() / b.float_value());
      }
      break;
    case BinaryOp::kFloorDiv:
      if (ints) {
        const std::int64_t x = a.int_value();
        const std::int64_t y = b.int_value();
        if (y == 0) fault(Fault::kType, "integer division or modulo by zero");
        if (x == std::numeric_limits<std::int64_t>::min() && y == -1) overflow();
        std::int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
        return Value::integer(q);
      }
      if (numbers) {
        if (b.float_value() == 0.0) fault(Fault::kType, "float floor division by zero");
        const double x = a.float_value();
        const double y = b.float_value();
        return Value::number((x - python_fmod(x, y)) / y);
      }
      break;
    case BinaryOp::kMod:
      if (ints) {
        const std::int64_t x = a.int_value();
        const std::int64_t y = b.int_value();
        if (y == 0) fault(Fault::kType, "integer modulo by zero");
        if (y == -1) return Value::integer(0);
        std::int64_t m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return Value::integer(m);
      }
      if (numbers) {
        if (b.float_value() == 0.0) fault(Fault::kType, "float modulo");
        return Value::number(python_fmod(a.float_value(), b.float_value()));
      }
      if (a.is_string()) {
        Value args = b;
        if (a.is_markup()) {  // Markup.__mod__ escapes the arguments
          const auto escape = [](const Value& v) {
            return v.is_string() && !v.is_markup() ? Value::string(html_escape(v.as_string()), true) : v;
          };
          if (b.is_tuple()) {
            std::vector<Value> items;
            for (const Value& item : b.list().items) items.push_back(escape(item));
            args = Value::tuple(std::move(items));
          } else {
            args = escape(b);
          }
        }
        return interpreter.make_string(percent_format(interpreter, a.as_string(), args), a.is_markup());
      }
      break;
    case BinaryOp::kPow:
      if (ints && b.int_value() >= 0) {
        std::int64_t base = a.int_value();
        std::int64_t exponent = b.int_value();
        std::int64_t result = 1;
        while (exponent > 0) {
          if (exponent & 1) result = multiply(result, base);
          exponent >>= 1;
          if (exponent > 0) base = multiply(base, base);
        }
        return Value::integer(result);
      }
      if (numbers) {
        const double x = a.float_value();
        const double y = b.float_value();
        if (x == 0.0 && y < 0) fault(Fault::kType, "0.0 cannot be raised to a negative power");
        if (x < 0 && y != std::floor(y)) fault(Fault::kUnsupported, "a complex result of '**'");
        return Value::number(std::pow(x, y));
      }
      break;
  }
  unsupported_operands(op, a, b);
}

bool contains(Interpreter& interpreter, const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!item.is_string()) fault(Fault::kType, "'in <string>' requires string as left operand, not {}", type_name(item));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& element : container.list().items) {
        if (equals(element, item)) return true;
      }
      return false;
    case Value::Kind::kDict: return container.dict().find(item) != nullptr;
    case Value::Kind::kObject:
      if (auto* iterator = dynamic_cast<IteratorObject*>(container.object())) {
        while (std::optional<Value> element = iterator->next()) {
          if (equals(*element, item)) return true;
        }
        return false;
      }
      break;
    default: break;
  }
  (void)interpreter;
  fault(Fault::kType, "argument of type '{}' is not iterable", type_name(container));
}

}  // namespace sitsrt::chat
