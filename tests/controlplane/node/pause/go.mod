module kiln.dev/controlplane/pause

go 1.25
