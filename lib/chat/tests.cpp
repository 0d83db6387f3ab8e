// jinja2's builtin tests (jinja2/tests.py).
#include "chat/builtins.hpp"
#include "chat/interpreter.hpp"
#include "chat/objects.hpp"
#include "chat/unicode.hpp"

#include <algorithm>
#include <array>

namespace sitsrt::chat {
namespace {

const Value& one_argument(CallArgs& args, std::string_view test) {
  static const Value kNone;
  ArgReader reader(test, args, {"other"});
  const Value* other = reader.get(0);
  if (other == nullptr) fault(Fault::kType, "{}() missing 1 required positional argument", test);
  (void)kNone;
  return *other;
}

void no_arguments(CallArgs& args, std::string_view test) { ArgReader(test, args, {}); }

Value remainder(Interpreter& interpreter, const Value& v, const Value& divisor) {
  return binary_op(interpreter, BinaryOp::kMod, v, divisor);
}

bool t_odd(Interpreter& i, const Value& v, CallArgs& a) {
  no_arguments(a, "odd");
  return equals(remainder(i, v, Value::integer(2)), Value::integer(1));
}
bool t_even(Interpreter& i, const Value& v, CallArgs& a) {
  no_arguments(a, "even");
  return equals(remainder(i, v, Value::integer(2)), Value::integer(0));
}
bool t_divisibleby(Interpreter& i, const Value& v, CallArgs& a) {
  return equals(remainder(i, v, one_argument(a, "divisibleby")), Value::integer(0));
}
bool t_defined(Interpreter&, const Value& v, CallArgs& a) {
  no_arguments(a, "defined");
  return !v.is_undefined();
}
bool t_undefined(Interpreter&, const Value& v, CallArgs& a) {
  no_arguments(a, "undefined");
  return v.is_undefined();
}
bool t_filter(Interpreter&, const Value& v, CallArgs& a) {
  no_arguments(a, "filter");
  return v.is_string() && find_filter(v.as_string()) != nullptr;
}
bool t_test(Interpreter&, const Value& v, CallArgs& a) {
  no_arguments(a, "test");
  return v.is_string() && find_test(v.as_string()) != nullptr;
}
bool t_none(Interpreter&, const Value& v, CallArgs& a) {
  no_arguments(a, "none");
  return v.is_none();
}
bool t_boolean(Interpreter&, const Value& v, CallArgs& a) {
  no_arguments(a, "boolean");
  return v.is_bool();
}
bool t_false(Interpreter&, const Value& v, CallArgs& a) {
  no_arguments(a, "false");
  return v.is_bool() && !v.as_bool();
}
bool t_true(Interpreter&, const Value& v, CallArgs& a) {
  no_arguments(a, "true");
  return v.is_bool() && v.as_bool();
}
bool t_integer(Interpreter&, const Value& v, CallArgs& a) {
  no_arguments(a, "integer");
  return v.is_int();
}
bool t_float(Interpreter&, const Value& v, CallArgs& a) {
  no_arguments(a, "float");
  return v.is_float();
}
bool t_lower(Interpreter&, const Value& v, CallArgs& a) {
  no_arguments(a, "lower");
  bool cased = false;
  for (const char32_t c : unicode::decode(to_str(v))) {
    if (unicode::is_upper(c)) return false;
    cased = cased || unicode::is_lower(c);
  }
  return cased;
}
bool t_upper(Interpreter&, const Value& v, CallArgs& a) {
  no_arguments(a, "upper");
  bool cased = false;
  for (const char32_t c : unicode::decode(to_str(v))) {
    if (unicode::is_lower(c)) return false;
    cased = cased || unicode::is_upper(c);
  }
  return cased;
}
bool t_string(Interpreter&, const Value& v, CallArgs& a) {
  no_arguments(a, "string");
  return v.is_string();
}
bool t_mapping(Interpreter&, const Value& v, CallArgs& a) {
  no_arguments(a, "mapping");
  return v.is_dict();
}
bool t_number(Interpreter&, const Value& v, CallArgs& a) {
  no_arguments(a, "number");
  return v.is_number();  // bool is a numbers.Number in Python
}
// len(value) and value.__getitem__ both exist (true of Undefined too, as in jinja2).
bool t_sequence(Interpreter&, const Value& v, CallArgs& a) {
  no_arguments(a, "sequence");
  if (v.is_undefined() || v.is_string() || v.is_dict()) return true;
  return v.is_indexable();
}
bool t_iterable(Interpreter&, const Value& v, CallArgs& a) {
  no_arguments(a, "iterable");
  if (v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict()) return true;
  return v.is_object() && (dynamic_cast<IteratorObject*>(v.object()) != nullptr || dynamic_cast<LoopObject*>(v.object()) != nullptr);
}
bool t_callable(Interpreter&, const Value& v, CallArgs& a) {
  no_arguments(a, "callable");
  return v.is_undefined() || (v.is_object() && v.object()->callable());
}
// Python's `is`: singletons and small ints compare by value, other objects by identity.
bool t_sameas(Interpreter&, const Value& v, CallArgs& a) {
  const Value& other = one_argument(a, "sameas");
  if (v.kind() != other.kind()) return false;
  switch (v.kind()) {
    case Value::Kind::kNone: return true;
    case Value::Kind::kBool: return v.as_bool() == other.as_bool();
    case Value::Kind::kInt: return v.as_int() == other.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    case Value::Kind::kList: return &v.list() == &other.list();
    case Value::Kind::kDict: return &v.dict() == &other.dict();
    case Value::Kind::kString: return &v.as_string() == &other.as_string();
    case Value::Kind::kObject: return v.object() == other.object();
    default: return false;
  }
}
bool t_escaped(Interpreter&, const Value& v, CallArgs& a) {
  no_arguments(a, "escaped");
  return v.is_markup();
}
bool t_in(Interpreter& i, const Value& v, CallArgs& a) { return contains(i, one_argument(a, "in"), v); }
bool t_eq(Interpreter&, const Value& v, CallArgs& a) { return equals(v, one_argument(a, "eq")); }
bool t_ne(Interpreter&, const Value& v, CallArgs& a) { return !equals(v, one_argument(a, "ne")); }
bool t_gt(Interpreter&, const Value& v, CallArgs& a) { return less(one_argument(a, "gt"), v, ">"); }
bool t_ge(Interpreter&, const Value& v, CallArgs& a) {
  const Value& other = one_argument(a, "ge");
  return less(other, v, ">=") || equals(v, other);
}
bool t_lt(Interpreter&, const Value& v, CallArgs& a) { return less(v, one_argument(a, "lt"), "<"); }
bool t_le(Interpreter&, const Value& v, CallArgs& a) {
  const Value& other = one_argument(a, "le");
  return less(v, other, "<=") || equals(v, other);
}

struct NamedTest {
  std::string_view name;
  TestFunction function;
};

constexpr std::array kTests = {
    NamedTest{"odd", t_odd},         NamedTest{"even", t_even},         NamedTest{"divisibleby", t_divisibleby},
    NamedTest{"defined", t_defined}, NamedTest{"undefined", t_undefined}, NamedTest{"filter", t_filter},
    NamedTest{"test", t_test},       NamedTest{"none", t_none},         NamedTest{"boolean", t_boolean},
    NamedTest{"false", t_false},     NamedTest{"true", t_true},         NamedTest{"integer", t_integer},
    NamedTest{"float", t_float},     NamedTest{"lower", t_lower},       NamedTest{"upper", t_upper},
    NamedTest{"string", t_string},   NamedTest{"mapping", t_mapping},   NamedTest{"number", t_number},
    NamedTest{"sequence", t_sequence}, NamedTest{"iterable", t_iterable}, NamedTest{"callable", t_callable},
    NamedTest{"sameas", t_sameas},   NamedTest{"escaped", t_escaped},   NamedTest{"in", t_in},
    NamedTest{"==", t_eq},           NamedTest{"eq", t_eq},             NamedTest{"equalto", t_eq},
    NamedTest{"!=", t_ne},           NamedTest{"ne", t_ne},             NamedTest{">", t_gt},
    NamedTest{"gt", t_gt},           NamedTest{"greaterthan", t_gt},    NamedTest{"ge", t_ge},
    NamedTest{">=", t_ge},           NamedTest{"<", t_lt},              NamedTest{"lt", t_lt},
    NamedTest{"lessthan", t_lt},     NamedTest{"<=", t_le},             NamedTest{"le", t_le},
};

}  // namespace

TestFunction find_test(std::string_view name) noexcept {
  for (const NamedTest& entry : kTests) {
    if (entry.name == name) return entry.function;
  }
  return nullptr;
}

bool jinja_has_test(std::string_view name) noexcept { return find_test(name) != nullptr; }

}  // namespace sitsrt::chat
