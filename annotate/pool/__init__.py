"""The pool in and out: importing solutions (`importing`), exporting labels (`exporting`), the
PRM800K line format both use (`prm800k`) and the demo pool (`synthetic` makes it, `demo` takes it
away). Their jobs' recovery is the ground floor's (`jobs.recovery`).
"""
