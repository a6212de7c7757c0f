// The `kiln` executable: see kiln/tools/cli.h.
#include "kiln/tools/cli.h"

int main(int argc, char** argv) { return kiln::tools::run_cli(std::vector<std::string>(argv + 1, argv + argc)); }
