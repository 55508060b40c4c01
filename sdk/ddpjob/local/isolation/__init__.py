"""What keeps one host apart: its own `/opt/ml`, its capabilities, its GPUs, the fixed port."""
