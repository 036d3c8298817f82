// The page's script.
