"""One processor per graph op (the speed layer's implementation of each node kind)."""
