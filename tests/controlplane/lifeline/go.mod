module kiln.dev/controlplane/lifeline

go 1.25
