"""The Python worker's own program, run confined (``python -E -s -c SOURCE FD CAP``):
stdlib only, nothing of sandlock. It reads requests on stdin, runs each in one
namespace that lasts as long as it does (state and imports persist), and writes each
reply on descriptor FD. Frames: 4 bytes of length (big-endian), then UTF-8 JSON.
During a request its descriptors 1 and 2 are files of its private /tmp, so what child
processes print is captured too; at most CAP bytes of each are sent back."""

SOURCE = r'''
import ast, json, os, struct, sys, tempfile, traceback
replies, cap = int(sys.argv[1]), int(sys.argv[2])
namespace = {"__name__": "__main__", "__builtins__": __builtins__}

def read_exactly(size):
    data = b""
    while len(data) < size:
        chunk = os.read(0, size - len(data))
        if not chunk:
            return None
        data += chunk
    return data

def send(reply):
    data = json.dumps(reply).encode()
    view = memoryview(struct.pack(">I", len(data)) + data)
    while view:
        view = view[os.write(replies, view):]

def run(code):
    tree = ast.parse(code, "<run_python>")
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, "<run_python>", "exec"), namespace)
    if last is not None:
        value = eval(compile(ast.Expression(last.value), "<run_python>", "eval"), namespace)
        if value is not None:
            return repr(value)
    return None

def taken(file):
    file.seek(0, 2)
    size = file.tell()
    file.seek(0)
    return file.read(cap).decode("utf-8", "replace"), max(size - cap, 0)

while True:
    header = read_exactly(4)
    if header is None:
        break
    code = read_exactly(struct.unpack(">I", header)[0]).decode("utf-8", "replace")
    outputs = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
    saved = [os.dup(1), os.dup(2)]
    os.dup2(outputs[0].fileno(), 1)
    os.dup2(outputs[1].fileno(), 2)
    value = error = None
    try:
        value = run(code)
    except BaseException as exc:
        tb = exc.__traceback__  # from the model's code on: the worker's frames are not its
        while tb is not None and tb.tb_frame.f_code.co_filename != "<run_python>":
            tb = tb.tb_next
        error = "".join(traceback.format_exception(type(exc), exc, tb))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
    (out, cut_out), (err, cut_err) = taken(outputs[0]), taken(outputs[1])
    send({"stdout": out, "stderr": err, "value": value if value is None else value[:cap],
          "error": error if error is None else error[-cap:], "dropped": [cut_out, cut_err]})
'''
