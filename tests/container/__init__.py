"""podman runs containers from the CDI specs the daemon writes."""
