"""The pool in and out: importing solutions (`importing`), exporting labels (`exporting`), the
PRM800K line format both use (`prm800k`), the demo pool (`synthetic` makes it, `demo` takes it
away) and the recovery of import and export jobs whose worker or broker was lost (`recovery`).
"""
