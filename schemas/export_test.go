package schemas

// Parse is exported for the external test package.
var Parse = parse
