"""`gpuagent top`: a live view of this node's GPUs (through the agent's collectors) or of the fleet."""
