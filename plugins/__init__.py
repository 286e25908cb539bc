"""The built-in plugins: each folder is a plugin, loaded through the same hooks as third-party ones."""
