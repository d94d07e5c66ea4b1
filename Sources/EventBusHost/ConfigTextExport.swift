// The config text types (ConfigError above all) are part of the host's API: whoever loads a
// config with the host catches them.
@_exported import ConfigText
