"""The daemon's configuration: the YAML file, its flags, and the web config file."""
