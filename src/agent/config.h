// Loads an agent config (YAML) and builds its agents. Every error names the file, the line and
// the field. See docs/agents.md for the schema.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "agent/agent.h"

namespace jiffy::agent {

struct LoadOptions {
    bool fast = false;  // --fast: replay files as fast as possible
};

// Parses `path` and creates every agent (models compiled, stages prepared); nothing runs yet.
Status load_agents(const std::string& path, const LoadOptions& opt, std::vector<std::unique_ptr<Agent>>* out);
// The same over YAML text (`name` stands for the file in messages; relative paths resolve to `dir`).
Status load_agents_text(const std::string& text, const std::string& name, const std::string& dir, const LoadOptions& opt,
                        std::vector<std::unique_ptr<Agent>>* out);

}  // namespace jiffy::agent
