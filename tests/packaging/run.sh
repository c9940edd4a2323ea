#!/usr/bin/env bash
# Placeholder: the packaging suite is being written.
echo "tests/packaging: no tests yet"
