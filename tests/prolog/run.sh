#!/usr/bin/env bash
# Placeholder: the prolog suite is being written.
echo "tests/prolog: no tests yet"
