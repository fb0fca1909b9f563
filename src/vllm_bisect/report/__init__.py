"""Reports of a bisect: the result table and the JSON document."""
