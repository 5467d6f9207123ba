// The engine's version: part of every compile-cache key and entry (an entry written by another
// engine version is rebuilt, never trusted). Keep it equal to pyproject.toml's version (a
// Python test checks that).
#pragma once

namespace updraft {

inline constexpr const char* kEngineVersion = "0.2.0";

}  // namespace updraft
