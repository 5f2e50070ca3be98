"""Parsing and formatting one line of comma-separated values."""


def parse_line(line, sep=","):
    """Fields of a CSV line; double quotes group separators, and "" inside quotes is a quote."""
    fields = []
    field = ""
    quoted = False
    i = 0
    while i < len(line):
        char = line[i]
        if quoted:
            if char == '"' and i + 1 < len(line) and line[i + 1] == '"':
                field += '"'
                i += 1
            elif char == '"':
                quoted = False
            else:
                field += char
        elif char == '"':
            quoted = True
        elif char == sep:
            fields.append(field)
            field = ""
        else:
            field += char
        i += 1
    fields.append(field)
    return fields


def format_line(fields, sep=","):
    """The inverse of parse_line: quotes the fields holding separators or quotes."""
    out = []
    for field in fields:
        if sep in field or '"' in field:
            field = '"' + field.replace('"', '""') + '"'
        out.append(field)
    return sep.join(out)
