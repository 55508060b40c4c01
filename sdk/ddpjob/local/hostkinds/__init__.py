"""What a local job's hosts run, one `HostKind` each: our runtime, the DLC, a container command."""
