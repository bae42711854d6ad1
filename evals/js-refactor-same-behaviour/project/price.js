function student(p) { return Math.round(p * (1 - 0.2) * 100) / 100; }
function senior(p) { return Math.round(p * (1 - 0.3) * 100) / 100; }
function member(p) { return Math.round(p * (1 - 0.1) * 100) / 100; }
module.exports = { student, senior, member };
