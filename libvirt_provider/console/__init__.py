"""The console, VNC and port-forward server's pure core: authorisation decisions, the session
registry, WebSocket framing and routes (docs/console.md). The shell is adapters/process/."""
