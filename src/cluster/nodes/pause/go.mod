module github.com/sandbox-operator/pause

go 1.26.0
