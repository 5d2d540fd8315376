module sandbox-operator/agent

go 1.26
