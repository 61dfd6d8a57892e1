#include "config/yaml_options.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cstring>
#include <fstream>
#include <sstream>

namespace vrdma::config {

namespace {

constexpr size_t kCommentWidth = 96;

[[noreturn]] void fail(const std::string& file, int line, const std::string& key,
                       const std::string& what) {
  std::string where = file + ":" + std::to_string(line);
  throw CLI::ConfigError(where + ": " + (key.empty() ? "" : key + ": ") + what);
}

int line_of(const YAML::Node& node) {
  return node.Mark().line + 1;  // yaml-cpp counts from 0
}

const char* shape_of(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Null:
      return "no value";
    default:
      return "a value";
  }
}

// The type an option converts to, without the validators CLI11 appends ("INT:INT in [1 - 10]").
std::string type_of(const CLI::Option& opt) {
  std::string t = opt.get_type_name();
  if (auto colon = t.find(':'); colon != std::string::npos) t.resize(colon);
  return t.empty() ? "value" : t;
}

// CLI11's message for an option, without the "--key: " it starts with.
std::string reason(const CLI::Error& e, const CLI::Option& opt,
                   const std::vector<std::string>& in) {
  std::string what = e.what();
  if (dynamic_cast<const CLI::ConversionError*>(&e)) {
    std::string joined;
    for (const auto& v : in) joined += (joined.empty() ? "" : ", ") + v;
    return "'" + joined + "' is not a valid " + type_of(opt);
  }
  for (const std::string& prefix : {opt.get_name() + ": ", opt.get_name() + " "})
    if (what.compare(0, prefix.size(), prefix) == 0) return what.substr(prefix.size());
  return what;
}

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// One value of a key and the line it is on.
struct Value {
  std::string text;
  int line;
};

// The values of one key: scalars, checked for the option's shape.
std::vector<Value> values_of(const YAML::Node& value, const CLI::Option& opt,
                             const std::string& file, const std::string& key) {
  const bool list = takes_list(opt);
  std::vector<Value> out;
  if (value.IsScalar()) {
    out.push_back({value.Scalar(), line_of(value)});
  } else if (value.IsSequence()) {
    if (!list)
      fail(file, line_of(value), key,
           "takes one " +
               (opt.get_expected_max() == 0 ? std::string("true or false") : type_of(opt)) +
               ", not a list");
    for (const auto& item : value) {
      if (!item.IsScalar())
        fail(file, line_of(item), key,
             std::string("list items are single values, not ") + shape_of(item));
      out.push_back({item.Scalar(), line_of(item)});
    }
  } else if (value.IsNull()) {
    fail(file, line_of(value), key, "no value (write \"\" for an empty text, [] for no items)");
  } else {
    fail(file, line_of(value), key,
         std::string("takes ") + (list ? "a list of values" : "one value") + ", not a map");
  }
  return out;
}

// Gives `values` to `opt` and runs its conversion and validators. A list is given one more item
// at a time, so that an error names the line of the item that caused it.
void give(CLI::Option& opt, const std::vector<Value>& values, const std::string& file,
          const std::string& key) {
  std::vector<std::string> texts;
  for (const auto& v : values) {
    texts.push_back(v.text);
    try {
      opt.clear();
      if (opt.get_expected_max() == 0) {  // a flag: YAML's true or false
        bool on;
        if (YAML::convert<bool>::decode(YAML::Node(v.text), on))
          opt.add_result(on ? "true" : "false");
        else
          opt.add_result(opt.get_flag_value(key, v.text));
      } else {
        opt.add_result(texts);
      }
      opt.run_callback();
    } catch (const CLI::Error& e) {
      fail(file, v.line, key, reason(e, opt, {v.text}));
    }
  }
}

std::string wrap_comment(const std::string& text) {
  std::string out;
  std::istringstream lines(text);
  std::string paragraph;
  while (std::getline(lines, paragraph)) {
    std::istringstream words(paragraph);
    std::string word, line = "#";
    while (words >> word) {
      if (line.size() > 1 && line.size() + 1 + word.size() > kCommentWidth) {
        out += line + "\n";
        line = "#";
      }
      line += " " + word;
    }
    out += line + "\n";
  }
  return out;
}

// A key's default as YAML: what CLI11 shows as the option's default, or for options without one
// false (flags), [] (lists) or "" (text).
std::string default_yaml(const CLI::Option& opt) {
  std::string d = opt.get_default_str();
  if (opt.get_expected_max() == 0) return d.empty() ? "false" : d;
  if (takes_list(opt)) {
    if (d.empty() || d == "[]") return "[]";
    if (d.front() == '[' && d.back() == ']') d = d.substr(1, d.size() - 2);
    std::string out;
    std::istringstream items(d);
    std::string item;
    while (std::getline(items, item, ',')) out += (out.empty() ? "" : ", ") + yaml_scalar(item);
    return "[" + out + "]";
  }
  return yaml_scalar(d);
}

}  // namespace

std::string key_of(const CLI::Option& option) {
  if (!option.get_configurable() || option.get_lnames().empty()) return "";
  return option.get_lnames().front();
}

bool takes_list(const CLI::Option& option) {
  return option.get_items_expected_max() > 1 ||
         option.get_multi_option_policy() == CLI::MultiOptionPolicy::TakeAll ||
         option.get_multi_option_policy() == CLI::MultiOptionPolicy::Join;
}

std::string yaml_scalar(const std::string& value) {
  YAML::Emitter e;
  e << YAML::DoubleQuoted << value;
  std::string quoted = e.c_str();
  YAML::Emitter plain;
  plain << value;
  std::string p = plain.c_str();
  // Plain text only when it reads back as the same string (and not as true, null, a number...).
  if (!value.empty() && p == value) {
    try {
      YAML::Node n = YAML::Load(p);
      if (n.IsScalar() && n.Tag() != "!" && n.Scalar() == value) {
        bool is_bool;
        if (!YAML::convert<bool>::decode(n, is_bool)) return p;
      }
    } catch (const YAML::Exception&) {
    }
  }
  return quoted;
}

YamlOptions::YamlOptions(CLI::App& app, std::string default_path)
    : app_(app), default_path_(std::move(default_path)) {
  option_ = app_.add_option("--config", given_path_,
                            "YAML file of settings, one key per option (router-listen: ADDR:PORT; "
                            "lists for repeatable options); the command line overrides it; '' "
                            "for none")
                ->default_str(default_path_)
                ->configurable(false);
}

void YamlOptions::parse(int argc, const char* const* argv) {
  // Required options are checked after the file, which may give them.
  std::vector<CLI::Option*> required;
  for (CLI::Option* opt : app_.get_options())
    if (opt->get_required()) {
      required.push_back(opt);
      opt->required(false);
    }
  app_.parse(argc, argv);
  std::string path = option_->count() > 0 ? given_path_ : default_path_;
  if (option_->count() > 0 && path.empty()) {
    file_.clear();  // --config '': no file
  } else if (option_->count() > 0 || is_regular_file(path)) {
    apply_file(path);
    file_ = path;
  }
  for (CLI::Option* opt : required) {
    opt->required(true);
    if (opt->count() == 0) throw CLI::RequiredError(opt->get_name());
  }
}

void YamlOptions::apply_file(const std::string& path) {
  if (::access(path.c_str(), R_OK) != 0)
    throw CLI::FileError(path + ": cannot read the configuration file: " + std::strerror(errno));
  std::ifstream in(path);
  if (!in) throw CLI::FileError(path + ": cannot read the configuration file");
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(in);
  } catch (const YAML::ParserException& e) {
    fail(path, e.mark.line + 1, "", "not YAML: " + e.msg);
  }
  if (docs.size() > 1) fail(path, line_of(docs[1]), "", "one YAML document only");
  if (docs.empty() || docs[0].IsNull()) return;  // empty, or comments only
  const YAML::Node& root = docs[0];
  if (!root.IsMap())
    fail(path, line_of(root), "", std::string("expected KEY: VALUE lines, not ") + shape_of(root));

  std::map<std::string, int> seen;
  for (const auto& entry : root) {
    const YAML::Node& k = entry.first;
    if (!k.IsScalar()) fail(path, line_of(k), "", "a key must be a name");
    const std::string key = k.Scalar();
    if (auto [it, fresh] = seen.emplace(key, line_of(k)); !fresh)
      fail(path, line_of(k), key, "given twice (also on line " + std::to_string(it->second) + ")");
    CLI::Option* opt = app_.get_option_no_throw("--" + key);
    if (!opt || key_of(*opt) != key) {
      bool exists = opt != nullptr;
      fail(path, line_of(k), key,
           exists ? "cannot be set in a configuration file"
                  : "unknown key (the keys are " + app_.get_name() +
                        "'s options without \"--\"; see --help)");
    }
    std::vector<Value> values = values_of(entry.second, *opt, path, key);
    if (!opt->empty()) continue;   // the command line (or the environment) said otherwise
    if (values.empty()) continue;  // [] : no items, as by default
    give(*opt, values, path, key);
  }
}

std::string config_template(const CLI::App& app, const std::string& header,
                            const std::function<std::string(const std::string& key)>& note) {
  std::string out = header;
  if (!out.empty() && out.back() != '\n') out += "\n";
  for (const CLI::Option* opt : app.get_options()) {
    std::string key = key_of(*opt);
    if (key.empty()) continue;
    std::string text = opt->get_description();
    if (takes_list(*opt)) text += "\nA list: " + key + ": [A, B] (or one item per line: - A).";
    if (note) {
      std::string n = note(key);
      if (!n.empty()) text += "\n" + n;
    }
    out += "\n" + wrap_comment(text) + "#" + key + ": " + default_yaml(*opt) + "\n";
  }
  return out;
}

std::map<std::string, std::vector<std::string>> given_values(const CLI::App& app) {
  std::map<std::string, std::vector<std::string>> out;
  for (const CLI::Option* opt : app.get_options()) {
    std::string key = key_of(*opt);
    if (!key.empty() && opt->count() > 0) out[key] = opt->results();
  }
  return out;
}

std::string effective_config(const CLI::App& app) {
  std::string out;
  for (const CLI::Option* opt : app.get_options()) {
    std::string key = key_of(*opt);
    if (key.empty()) continue;
    std::string value;
    if (opt->count() == 0) {
      value = default_yaml(*opt);
    } else if (opt->get_expected_max() == 0) {
      value = opt->as<bool>() ? "true" : "false";
    } else if (takes_list(*opt)) {
      for (const auto& v : opt->results()) value += (value.empty() ? "" : ", ") + yaml_scalar(v);
      value = "[" + value + "]";
    } else {
      value = yaml_scalar(opt->results().back());
    }
    out += key + ": " + value + "\n";
  }
  return out;
}

}  // namespace vrdma::config
