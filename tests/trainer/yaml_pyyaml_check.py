#!/usr/bin/env python3
"""Cross-checks kiln's YAML reader and writer (kiln/trainer/yaml.h) against PyYAML. Not part of the test suite.

    python3 tests/trainer/yaml_pyyaml_check.py        # needs g++ and PyYAML

It compiles a small driver against kiln/trainer/yaml.cpp, then for each document below:
  1. parses it with kiln and with PyYAML (safe_load) and compares the values;
  2. writes kiln's tree back with kiln's emitter and checks that PyYAML reads the emitted text to the same value,
     which tests the emitter's quoting against an independent reader.
PyYAML reads YAML 1.1 and kiln the 1.2 core schema; the documents avoid the few places where they differ
(yes/no/on/off, 1e3 without a dot, 0o17, 010), except in the emitter check, where strings such as "yes" must come
out quoted so that both read them as strings.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DRIVER = r'''
#include <cstdio>
#include <iostream>
#include <sstream>
#include "kiln/tensor/error.h"
#include "kiln/trainer/yaml.h"
namespace yaml = kiln::trainer::yaml;

static void json_string(const std::string& s, std::ostream& out) {
  out << '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') out << '\\' << c;
    else if (c < 0x20) { char buf[8]; std::snprintf(buf, sizeof buf, "\\u%04x", c); out << buf; }
    else out << c;
  }
  out << '"';
}

// Typed JSON: floats as {"float": "text"} so that nan and inf survive.
static void to_json(const yaml::Node& n, std::ostream& out) {
  switch (n.kind()) {
    case yaml::Kind::Null: out << "null"; return;
    case yaml::Kind::Scalar:
      switch (n.scalar_type()) {
        case yaml::ScalarType::Bool: out << (n.as_bool() ? "true" : "false"); return;
        case yaml::ScalarType::Int: out << n.as_int(); return;
        case yaml::ScalarType::Float: { std::ostringstream f; f.precision(17); f << n.as_double(); out << "{\"float\": "; json_string(f.str(), out); out << "}"; return; }
        case yaml::ScalarType::String: json_string(n.text(), out); return;
      }
      return;
    case yaml::Kind::Sequence:
      out << '[';
      for (size_t i = 0; i < n.items().size(); ++i) { if (i) out << ','; to_json(n.items()[i], out); }
      out << ']';
      return;
    case yaml::Kind::Mapping:
      out << "{\"map\": [";
      for (size_t i = 0; i < n.entries().size(); ++i) {
        if (i) out << ',';
        out << '['; json_string(n.entries()[i].key, out); out << ','; to_json(n.entries()[i].value, out); out << ']';
      }
      out << "]}";
      return;
  }
}

int main(int argc, char** argv) {
  std::stringstream text;
  text << std::cin.rdbuf();
  try {
    yaml::Node doc = yaml::parse(text.str(), "doc");
    if (std::string(argv[1]) == "parse") to_json(doc, std::cout);
    else std::cout << yaml::emit(doc);
  } catch (const kiln::Error& e) {
    std::cout << "ERROR " << e.what();
    return 1;
  }
}
'''

DOCS = [
    "a: 1\nb: -2\nc: 0x1f\nd: 1.5\ne: -0.5e+3\nf: .inf\ng: -.inf\nh: true\ni: False\nj: ~\nk:\nl: text here\n",
    "list:\n  - 1\n  - [2, 3]\n  - {x: y}\n  -\n    deep: 1\n- ",
    "list:\n- a\n- b\nnext: 1\n",
    "- - a\n  - b\n- - c\n",
    "- name: x\n  value: 1\n- name: y\n  value: [1, 'two', \"three\"]\n",
    "s1: 'single ''quoted'''\ns2: \"esc \\t \\\" \\\\ \\x41 \\u00e9\"\ns3: plain # comment\ns4: a#b\ns5: http://x.org/a?b=c\n",
    "'quoted key': 1\n\"dq key\": 2\nkey with spaces: 3\n",
    "flow: [a b, 'c, d', [], {}, {k: v, k2: [1]}]\n",
    "---\n# comment\nroot:\n    four: 4\n    nested:\n        eight: 8\n",
    "empty_flow: []\nempty_map: {}\nquoted_num: '12'\nquoted_bool: \"true\"\n",
    "k: 'null'\nk2: '~'\nk3: ''\n",
    "top scalar",
    "[1, 2, 3]",
    "",
    "trainer:\n  max_epochs: 3\n  precision: 16-mixed\n  max_time: 00:12:00:00\nmodel:\n  hidden: [512, 256]\n",
    "u: caf\u00e9\nv: \"\\U0001F600\"\n",
    "neg: -0\npos: +12\nfl: 1.\nfl2: 10.25\n",
    # Documents both readers refuse.
    "a: b: c\n",
    "a: [1, 2\n",
    "a:\n\tb: 1\n",
    "a: 'open\n",
    "a: 1\n  b: 2\n",
    "- a\nb: 1\n",
]

# Strings whose emitted form must read back as the same string in PyYAML too.
TRICKY = ["yes", "No", "on", "OFF", "y", "n", "3", "1.5", "1e3", "0o17", "010", ".inf", "null", "~", "", " a", "a ",
          "a: b", "a #b", "#c", "- x", "[x]", "{x}", "&a", "*a", "!t", "|", ">", "'", '"', "%", "@", "`", "x\ny",
          "t\tx", "back\\slash", "end:", "a, b", "---", "...", "true", "0x1F", "2001-12-14", "1_000", "=", "<<"]


def normalize(v):
    """PyYAML's value in the driver's typed-JSON form."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return {"float": v}
    if isinstance(v, list):
        return [normalize(x) for x in v]
    if isinstance(v, dict):
        return {"map": [[k, normalize(x)] for k, x in v.items()]}
    return {"other": repr(v)}  # a YAML 1.1 type (a date): never equal to what kiln reads


def same(a, b):
    if isinstance(a, dict) and isinstance(b, dict) and "float" in a and "float" in b:
        x, y = float(a["float"]), float(b["float"])
        return (math.isnan(x) and math.isnan(y)) or x == y
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def run(driver, mode, text):
    p = subprocess.run([driver, mode], input=text.encode(), capture_output=True)
    return p.returncode, p.stdout.decode()


def main():
    with tempfile.TemporaryDirectory() as tmp:
        return check(tmp)


def check(tmp):
    src = os.path.join(tmp, "driver.cpp")
    driver = os.path.join(tmp, "driver")
    with open(src, "w") as f:
        f.write(DRIVER)
    subprocess.check_call(["g++", "-std=c++20", "-O1", "-I" + ROOT, src, os.path.join(ROOT, "kiln/trainer/yaml.cpp"),
                           os.path.join(ROOT, "kiln/tensor/error.cpp"), "-o", driver])
    failures = 0
    docs = DOCS + ["k: " + json.dumps(s) + "\n" for s in TRICKY]
    for text in docs:
        # The last entry of DOCS[1] ('- ' under a mapping) is an error for both readers; skip what PyYAML refuses.
        try:
            expected = normalize(yaml.safe_load(text))
        except yaml.YAMLError:
            rc, out = run(driver, "parse", text)
            if rc == 0:
                print("PyYAML refuses but kiln accepts:\n" + text)
                failures += 1
            continue
        rc, out = run(driver, "parse", text)
        if rc != 0 or not same(json.loads(out), expected):
            print("parse differs:\n%s\nkiln:   %s\nPyYAML: %s\n" % (text, out, json.dumps(expected)))
            failures += 1
            continue
        rc, emitted = run(driver, "emit", text)
        try:
            back = normalize(yaml.safe_load(emitted))
        except yaml.YAMLError as e:
            back = "PyYAML error: %s" % e
        if rc != 0 or not same(back, expected):
            print("emit differs:\n%s\n--- kiln emitted ---\n%s\nPyYAML reads: %s\n" % (text, emitted, json.dumps(back)))
            failures += 1
    print("%d documents, %d failures" % (len(docs), failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
